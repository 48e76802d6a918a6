package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// DeadLetterQueueReconciler keeps the Kafka topic of each DeadLetterQueue as specified (partitions,
// configs, retention by age and by count), reports its size in status, resolves two queues claiming
// one topic, and carries out the deletion policy.
type DeadLetterQueueReconciler struct {
	topicReconciler
	// growth is the message count history of each queue, for the growth rate.
	growth *growthHistory
	// stateCounts are the last counts by state of each queue.
	stateCounts *stateCountCache
}

// dlqSpec is what a queue's spec asks of Kafka, worked out once per reconcile.
type dlqSpec struct {
	// want is the queue's topic; stateWant its record of decisions (stateTopicSpec: nameless when
	// the topic's name leaves no room for it).
	want, stateWant kafka.TopicSpec
	// interval is the queue's refresh interval.
	interval time.Duration
}

// dlqRun is what a queue's phases found, each phase's result and the problems of Ready in the order
// met. A phase that did not run (an earlier one ended the run) left its zero result.
type dlqRun struct {
	spec dlqSpec
	// conn is the queue's Kafka connection, made by the connection phase (its admin nil until then)
	// or by the claim phase's cluster comparison; its clusterID is read through it.
	conn    kafkaClient
	topics  dlqTopics
	offsets dlqOffsets
	live    dlqLive
	// states are the dead letters held counted by state; nil when not known this time.
	states   *dlqStates
	problems problems
	// err is the error that ended the run (not a problem), returned for the work queue's backoff.
	err error
}

// dlqOwner is the name of a queue in the connection registry and the batched reads.
func dlqOwner(key types.NamespacedName) string { return "DeadLetterQueue/" + key.String() }

// dlqStatusWriter writes a queue's status.
var dlqStatusWriter = statusWriter[*retryv1alpha1.DeadLetterQueue]{
	conditions: func(q *retryv1alpha1.DeadLetterQueue) []metav1.Condition { return q.Status.Conditions },
	logKey:     "deadLetterQueue", ready: "Dead letter queue is ready", notReady: "Dead letter queue is not ready", action: "Reconcile",
}

// Reconcile brings one queue's topic in line with its spec and refreshes its status.
func (r *DeadLetterQueueReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dlq := &retryv1alpha1.DeadLetterQueue{}
	if ok, err := r.fetch(ctx, req, dlq, r.gone); !ok {
		return ctrl.Result{}, err
	}
	spec := dlqSpec{interval: r.refreshInterval(dlq), want: dlqTopicSpec(dlq)}
	spec.stateWant = stateTopicSpec(spec.want)
	if !dlq.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, dlq, spec)
	}
	return r.reconcileNormal(ctx, dlq, spec)
}

// refreshInterval is how often the queue's live figures are refreshed.
func (r *DeadLetterQueueReconciler) refreshInterval(dlq *retryv1alpha1.DeadLetterQueue) time.Duration {
	if d := dlq.Spec.StatusRefreshInterval; d != nil && d.Duration > 0 {
		return d.Duration
	}
	return r.RefreshInterval
}

// gone drops the gauges of a queue that is gone. What else is kept about it (its batched reads,
// tally, counts, growth history, connection) is leased and goes by itself.
func (r *DeadLetterQueueReconciler) gone(key types.NamespacedName) {
	if r.Metrics != nil {
		r.Metrics.DeleteDeadLetterQueue(key.Namespace, key.Name)
	}
}

// reconcileNormal runs a queue's phases (runPhases), then patches the status built from what they
// found, whatever they met, and requeues in phase with the connection's offsets rounds.
func (r *DeadLetterQueueReconciler) reconcileNormal(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec) (ctrl.Result, error) {
	run := r.runPhases(ctx, dlq, spec)
	r.recordTopicChanges(dlq, run.topics)
	owner := dlqOwner(client.ObjectKeyFromObject(dlq))
	result, err := finishReconcile(run.err, run.problems, func() error { return r.writeStatus(ctx, dlq, &run) }, func() time.Duration {
		// In phase with the connection's offsets rounds, so that the figures are at most one
		// interval old.
		return r.Kafka.Offsets.UntilNextRound(run.conn.connKey, owner, spec.interval)
	})
	if err != nil {
		// The retry describes its topics fresh: what it read may be what failed it.
		r.Kafka.Topics.Unsettle(owner)
		return result, err
	}
	if result.IsZero() {
		// Secrets are not watched: a queue waiting on one looks again at the resync.
		result.RequeueAfter = resyncWhileStalled(kafkaspec.SecretNames(dlq.Spec.Kafka), spec.interval)
	}
	return result, nil
}

// runPhases runs a queue's phases in order, each on what the earlier ones returned:
//
//  1. the finalizer, then the alert rules, which need no Kafka: they are in place while the
//     brokers are unreachable (a problem with them does not end the run);
//  2. the connection, then the claim (claimTopic): the policy gives the queue its topic and no
//     older queue on its cluster has it;
//  3. topics (dlqTopics): the topic and its record of decisions, created, adopted or corrected;
//  4. offsets (dlqOffsets): read, and the topic trimmed to retention.maxMessages;
//  5. figures (dlqLive): the breakdown and the growth rate;
//  6. states: the dead letters held counted by state.
//
// A problem a phase returns ends the run, recorded in run.problems; another error ends it too, as a
// transient problem, and is run.err.
func (r *DeadLetterQueueReconciler) runPhases(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec) dlqRun {
	run := dlqRun{spec: spec}
	ps := &run.problems
	r.keepFigures(dlq, spec.interval)
	// end ends the run on err as endStep says, err named after its step unless name is "" (a
	// phase that names its own).
	end := func(name string, err error) bool {
		if name != "" {
			err = named(name, err)
		}
		stop, err := endStep(ps, err)
		run.err = err
		return stop
	}
	if end("Finalizer", r.addFinalizer(ctx, dlq)) || end("Alerts", r.reconcileAlerts(ctx, dlq, ps)) ||
		end("Connection", r.connectQueue(ctx, dlq, &run.conn)) || end("Claim", r.claimTopic(ctx, dlq, spec, &run.conn)) {
		return run
	}
	var err error
	if run.topics, err = r.topics(ctx, dlq, spec, &run.conn, ps); end("", err) {
		return run
	}
	if run.offsets, err = r.readOffsets(ctx, dlq, spec, run.topics, &run.conn); end("Offsets", err) {
		return run
	}
	if end("Retention", r.enforceMaxMessages(ctx, dlq, spec, &run.conn, &run.offsets)) {
		return run
	}
	if run.live, err = r.figures(ctx, dlq, spec, run.offsets, &run.conn); end("LiveFigures", err) {
		return run
	}
	run.states, err = r.refreshStates(ctx, dlq, spec, run.topics, run.offsets, run.live, &run.conn)
	end("States", err)
	return run
}

// writeStatus patches the status built from what the phases found, records an event when Ready
// changed, and publishes the live figures.
func (r *DeadLetterQueueReconciler) writeStatus(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, run *dlqRun) error {
	before := dlq.Status.DeepCopy()
	r.judgeFigures(dlq, run)
	st := dlqStatus(dlq, run)
	w := dlqStatusWriter
	if run.topics.changeReason == eventTopicCreated {
		// The event of the topics created says what the first Ready would.
		w.quiet = firstReady
	}
	if _, _, err := w.patch(ctx, r.Client, r.Recorder, dlq, func(q *retryv1alpha1.DeadLetterQueue) { q.Status = st }, run.problems, "", "topic", st.Topic); err != nil {
		return err
	}
	r.warnLongMissing(dlq, run.problems, run.spec.interval)
	r.publishLiveFigures(ctx, dlq, run.live, before, st)
	return nil
}

// patchStatus writes st and records an event when Ready changed.
func (r *DeadLetterQueueReconciler) patchStatus(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, st retryv1alpha1.DeadLetterQueueStatus, ps problems) error {
	_, _, err := dlqStatusWriter.patch(ctx, r.Client, r.Recorder, dlq, func(q *retryv1alpha1.DeadLetterQueue) { q.Status = st }, ps, "", "topic", st.Topic)
	return err
}

// reconcileDelete carries out the deletion policy, then removes the finalizer. Kafka being
// unreachable never wedges deletion: after DeletionTimeout from the deletion timestamp the finalizer
// goes with a Warning event saying the topic may remain.
func (r *DeadLetterQueueReconciler) reconcileDelete(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(dlq)
	log := ctrl.LoggerFrom(ctx).WithValues("deadLetterQueue", klog.KObj(dlq), "topic", spec.want.Name)
	letGo := func() (ctrl.Result, error) { return r.letGo(ctx, dlq, func() { r.gone(key) }) }
	if !controllerutil.ContainsFinalizer(dlq, topicFinalizer) {
		return letGo()
	}
	if dlq.Spec.DeletionPolicy != retryv1alpha1.DeletionPolicyDelete {
		log.Info("Kept topic")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept (deletionPolicy Retain)", spec.want.Name)
		return letGo()
	}
	if p := r.claimProblem(dlq, spec.want.Name); p != nil {
		log.Info("Kept topic the claim policy refuses the queue")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: the claim policy does not give it to this queue's namespace", spec.want.Name)
		return letGo()
	}
	owned, err := r.ownedTopics(ctx, dlq)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !slices.Contains(owned, spec.want.Name) {
		log.Info("Kept topic the operator did not create")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: the operator did not create it for this queue", spec.want.Name)
		return letGo()
	}
	// The record of decisions goes with the dead letters it describes.
	topics := []string{spec.want.Name}
	if n := spec.stateWant.Name; n != "" && slices.Contains(owned, n) {
		topics = append(topics, n)
	}
	var k kafkaClient
	winner, _, err := r.topicOwner(ctx, dlq, &k)
	if err != nil {
		return ctrl.Result{}, err
	}
	if winner.UID != dlq.UID {
		log.Info("Left topic to its owner", "owner", winner.String())
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: it is managed by %s", spec.want.Name, winner)
		return letGo()
	}
	var ps problems
	return r.deleteWithinBound(ctx, dlq, topicDeletion{
		topics: topics,
		delete: func(ctx context.Context) error {
			if err := r.connectQueue(ctx, dlq, &k); err != nil {
				return err
			}
			var errs []error
			for _, t := range topics {
				err := k.admin.DeleteTopic(ctx, t)
				if err == nil {
					r.Kafka.Topics.Set(k.connKey, kafka.TopicInfo{Name: t})
				}
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		},
		deleted: fmt.Sprintf("Topic %s deleted (deletionPolicy Delete)", strings.Join(topics, " and ")),
		mayRemain: func(err string) string {
			return fmt.Sprintf("Gave up deleting topic %s after %s, the topic may remain in Kafka: %s", spec.want.Name, r.DeletionTimeout, err)
		},
		failing: func(ctx context.Context, err string, deadline time.Time) error {
			st := dlq.Status.DeepCopy()
			ps.add(&problem{Reason: retryv1alpha1.ReasonDeleting, Message: fmt.Sprintf("deleting topic %q: %s; retrying until %s, then the queue goes and the topic may remain",
				spec.want.Name, err, deadline.UTC().Format(time.RFC3339))})
			setDLQReady(st, dlq.Generation, ps, "")
			return r.patchStatus(ctx, dlq, *st, ps)
		},
	}, letGo)
}

// SetupWithManager registers the controller. Besides its queues it watches other queues claiming
// the same topic (the loser of a conflict takes over as soon as the owner goes). The Secrets they
// reference are not watched (cache.go): a rotated password is picked up at the next resync.
func (r *DeadLetterQueueReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&retryv1alpha1.DeadLetterQueue{}, builder.WithPredicates(specOrLifecycleChanged())).
		Watches(&retryv1alpha1.DeadLetterQueue{}, handler.EnqueueRequestsFromMapFunc(r.otherClaimants), builder.WithPredicates(createdOrDeleted())).
		// The alert rules: the ConfigMap form, the CRD that switches the form, and while it is
		// served the PrometheusRules (ruleapi.API.Watch).
		Owns(&corev1.ConfigMap{})
	b = r.Rules.WatchCRD(b, r.Client, func() client.ObjectList { return &retryv1alpha1.DeadLetterQueueList{} })
	c, err := b.WithOptions(r.Controller).Named("deadletterqueue").Build(r)
	if err != nil {
		return err
	}
	r.Rules.Watch(c, mgr.GetScheme(), &retryv1alpha1.DeadLetterQueue{})
	return nil
}

// otherClaimants maps a queue to the other queues claiming a topic of its name, on any cluster (the
// reconcile tells which are on its own).
func (r *DeadLetterQueueReconciler) otherClaimants(ctx context.Context, o client.Object) []ctrl.Request {
	dlq := o.(*retryv1alpha1.DeadLetterQueue)
	return requestsFor(ctx, r.Client, &retryv1alpha1.DeadLetterQueueList{}, dlq, client.MatchingFields{indexDLQByClaim: string(dlq.Spec.Topic.Name)})
}
