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

// dlqScope is the state of one DeadLetterQueue reconcile, filled in by the steps.
type dlqScope struct {
	dlq      *retryv1alpha1.DeadLetterQueue
	interval time.Duration

	kafkaClient

	want  kafka.TopicSpec
	topic *kafka.TopicInfo // as it is after this reconcile's changes; nil if not described

	// stateWant is the record of decisions (stateTopicSpec), stateHave as described; stateTopic its
	// name once it exists as specified.
	stateWant    kafka.TopicSpec
	stateHave    kafka.TopicInfo
	stateTopic   string
	stateOffsets []kafka.PartitionOffsets
	// states are the dead letters held counted by state, nil when not known this time.
	states *dlqStates

	offsets   []kafka.PartitionOffsets
	offsetsAt time.Time
	counted   bool // offsets were read this reconcile

	live dlqLive // what the LiveFigures step found (deadletterqueue_live.go)

	// changes are what the reconcile changed in Kafka, for one event (changeReason) after the steps.
	changes      []string
	changeReason string

	problems problems
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
	if ok, err := r.fetch(ctx, req, dlq, r.forget); !ok {
		return ctrl.Result{}, err
	}
	s := &dlqScope{dlq: dlq, interval: r.RefreshInterval, want: dlqTopicSpec(dlq)}
	s.stateWant = stateTopicSpec(s.want)
	if d := dlq.Spec.StatusRefreshInterval; d != nil && d.Duration > 0 {
		s.interval = d.Duration
	}
	if !dlq.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

// forget drops everything kept about a queue that is gone, its gauges included.
func (r *DeadLetterQueueReconciler) forget(key types.NamespacedName) {
	owner := dlqOwner(key)
	r.Kafka.Offsets.Forget(owner)
	r.Kafka.Topics.Forget(owner)
	r.Kafka.Tallies.Forget(owner)
	r.Kafka.ByPipeline.Forget(owner)
	r.Kafka.Connections.Release(owner)
	r.growth.forget(key)
	r.stateCounts.forget(key)
	if r.Metrics != nil {
		r.Metrics.DeleteDeadLetterQueue(key.Namespace, key.Name)
	}
}

// reconcileNormal runs the steps; whatever they return, the status is then patched (deferred) from
// what they found.
func (r *DeadLetterQueueReconciler) reconcileNormal(ctx context.Context, s *dlqScope) (result ctrl.Result, reterr error) {
	defer func() {
		result, reterr = finishReconcile(reterr, s.problems, func() error { return r.writeStatus(ctx, s) }, func() time.Duration {
			// In phase with the connection's offsets rounds, so that the figures are at most one
			// interval old.
			return r.Kafka.Offsets.UntilNextRound(s.connKey, dlqOwner(client.ObjectKeyFromObject(s.dlq)), s.interval)
		})
		if reterr == nil && result.IsZero() {
			result.RequeueAfter = resyncWhileStalled(kafkaspec.SecretNames(s.dlq.Spec.Kafka), s.interval)
		}
		if reterr != nil {
			// The retry describes its topics fresh: what it read may be what failed it.
			r.Kafka.Topics.Unsettle(dlqOwner(client.ObjectKeyFromObject(s.dlq)))
		}
	}()
	err := runSteps(ctx, s, []step[*dlqScope]{
		{"Finalizer", func(ctx context.Context, s *dlqScope) error { return r.addFinalizer(ctx, s.dlq) }},
		{"Alerts", r.reconcileAlerts},
		{"Connection", r.connectQueue},
		{"Claim", r.claimTopic},
		{"Topic", r.reconcileTopic},
		{"StateTopic", r.reconcileStateTopic},
		{"Offsets", r.readOffsets},
		{"Retention", r.enforceMaxMessages},
		{"LiveFigures", r.refreshLiveFigures},
		{"States", r.refreshStates},
	}, &s.problems)
	r.recordTopicChanges(s)
	return ctrl.Result{}, err
}

// writeStatus patches the status rebuilt from s, records an event when Ready changed, and
// publishes the live figures.
func (r *DeadLetterQueueReconciler) writeStatus(ctx context.Context, s *dlqScope) error {
	before := s.dlq.Status.DeepCopy()
	r.judgeFigures(s)
	st := dlqStatus(s)
	w := dlqStatusWriter
	if s.changeReason == eventTopicCreated {
		// The event of the topics created says what the first Ready would.
		w.quiet = firstReady
	}
	if _, _, err := w.patch(ctx, r.Client, r.Recorder, s.dlq, func(q *retryv1alpha1.DeadLetterQueue) { q.Status = st }, s.problems, "", "topic", st.Topic); err != nil {
		return err
	}
	r.warnLongMissing(s.dlq, s.problems)
	r.publishLiveFigures(ctx, s, before, st)
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
func (r *DeadLetterQueueReconciler) reconcileDelete(ctx context.Context, s *dlqScope) (ctrl.Result, error) {
	dlq := s.dlq
	key := client.ObjectKeyFromObject(dlq)
	log := ctrl.LoggerFrom(ctx).WithValues("deadLetterQueue", klog.KObj(dlq), "topic", s.want.Name)
	letGo := func() (ctrl.Result, error) { return r.letGo(ctx, dlq, func() { r.forget(key) }) }
	if !controllerutil.ContainsFinalizer(dlq, topicFinalizer) {
		return letGo()
	}
	if dlq.Spec.DeletionPolicy != retryv1alpha1.DeletionPolicyDelete {
		log.Info("Kept topic")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept (deletionPolicy Retain)", s.want.Name)
		return letGo()
	}
	if p := r.claimProblem(dlq, s.want.Name); p != nil {
		log.Info("Kept topic the claim policy refuses the queue")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: the claim policy does not give it to this queue's namespace", s.want.Name)
		return letGo()
	}
	owned, err := r.ownedTopics(ctx, dlq)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !slices.Contains(owned, s.want.Name) {
		log.Info("Kept topic the operator did not create")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: the operator did not create it for this queue", s.want.Name)
		return letGo()
	}
	// The record of decisions goes with the dead letters it describes.
	topics := []string{s.want.Name}
	if n := s.stateWant.Name; n != "" && slices.Contains(owned, n) {
		topics = append(topics, n)
	}
	winner, _, err := r.topicOwner(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	if winner.UID != dlq.UID {
		log.Info("Left topic to its owner", "owner", winner.String())
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: it is managed by %s", s.want.Name, winner)
		return letGo()
	}
	return r.deleteWithinBound(ctx, dlq, topicDeletion{
		topics: topics,
		delete: func(ctx context.Context) error {
			if err := r.connectQueue(ctx, s); err != nil {
				return err
			}
			var errs []error
			for _, t := range topics {
				err := s.admin.DeleteTopic(ctx, t)
				if err == nil {
					r.Kafka.Topics.Set(s.connKey, kafka.TopicInfo{Name: t})
				}
				errs = append(errs, err)
			}
			return errors.Join(errs...)
		},
		deleted: fmt.Sprintf("Topic %s deleted (deletionPolicy Delete)", strings.Join(topics, " and ")),
		mayRemain: func(err string) string {
			return fmt.Sprintf("Gave up deleting topic %s after %s, the topic may remain in Kafka: %s", s.want.Name, r.DeletionTimeout, err)
		},
		failing: func(ctx context.Context, err string, deadline time.Time) error {
			st := dlq.Status.DeepCopy()
			s.problems.add(&problem{Reason: retryv1alpha1.ReasonDeleting, Message: fmt.Sprintf("deleting topic %q: %s; retrying until %s, then the queue goes and the topic may remain",
				s.want.Name, err, deadline.UTC().Format(time.RFC3339))})
			setDLQReady(st, dlq.Generation, s.problems, "")
			return r.patchStatus(ctx, dlq, *st, s.problems)
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
