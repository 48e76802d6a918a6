package controllers

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// ConsumerPipelineReconciler makes what a ConsumerPipeline needs: its topics (the source topic,
// checked or created when spec.source.create asks, and the retry tiers of the referenced
// RetryPolicy's plan), then its children: the dispatcher ConfigMap, the consumer Deployment and the
// alert rules (see reconcileChildren).
type ConsumerPipelineReconciler struct {
	topicReconciler
	// DispatcherImage is the image of the dispatcher in sink mode.
	DispatcherImage string
	// CircuitReportInterval is how often consumers repeat a circuit report that is not Closed
	// (DefaultCircuitReportInterval when zero); three intervals make a report stale.
	CircuitReportInterval time.Duration
	// APIReader reads uncached (the stored spec.template, strictly decoded; ScaledObjects); nil
	// skips that check.
	APIReader client.Reader
	// Autoscaler and KEDAPrometheusAddress are Options'.
	Autoscaler            string
	KEDAPrometheusAddress string

	keda *kindServed

	templates templateChecks
}

// pipelineOwner is the name of a pipeline in the connection registry and the batched reads.
func pipelineOwner(key types.NamespacedName) string { return "ConsumerPipeline/" + key.String() }

// pipelineStatusWriter writes a pipeline's status.
var pipelineStatusWriter = statusWriter[*retryv1alpha1.ConsumerPipeline]{
	conditions: func(p *retryv1alpha1.ConsumerPipeline) []metav1.Condition { return p.Status.Conditions },
	logKey:     "consumerPipeline", ready: "Pipeline is ready", notReady: "Pipeline is not ready", action: "Reconcile",
	quiet: scalingOnly,
}

// scalingOnly is true when Ready stays True and only the pod count moved (reasons Available and
// Scaling): an autoscaled pipeline scales all day, and each step is no news (ScaledToZero and Woke
// say what matters).
func scalingOnly(before, after *metav1.Condition) bool {
	steady := func(c *metav1.Condition) bool {
		return c != nil && c.Status == metav1.ConditionTrue && (c.Reason == reasonAvailable || c.Reason == reasonScaling)
	}
	return steady(before) && steady(after) && (before.Reason == reasonScaling || after.Reason == reasonScaling)
}

// Reconcile brings one pipeline's topics in line with its spec and policy and refreshes its status.
func (r *ConsumerPipelineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &retryv1alpha1.ConsumerPipeline{}
	if ok, err := r.fetch(ctx, req, p, r.gone); !ok {
		return ctrl.Result{}, err
	}
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, p)
	}
	return r.reconcileNormal(ctx, p)
}

// gone drops the gauges of a pipeline that is gone. What else is kept about it (its batched reads,
// its template check, its connection) is leased and goes by itself.
func (r *ConsumerPipelineReconciler) gone(key types.NamespacedName) {
	if r.Metrics != nil {
		r.Metrics.DeleteConsumerPipeline(key.Namespace, key.Name)
	}
}

// pipelineRun is what the phases before the children found: each phase's result, and the problems
// of TopicsReady in the order met. A phase that did not run (an earlier one ended the run) left its
// result as the previous status gives it.
type pipelineRun struct {
	refs   pipelineRefs
	claim  pipelineClaim
	topics pipelineTopics
	live   pipelineLive
	// problems are TopicsReady's.
	problems problems
	// err is the error that ended the run (not a problem: the API server, a write), returned for
	// the work queue's backoff; the children do not run then.
	err error
}

// refused is why the pipeline may not run: its claim refused, or a topic another resource holds.
func (run pipelineRun) refused() *problem { return cmp.Or(run.claim.refused, run.topics.refused) }

// reconcileNormal runs a pipeline's phases in order, each on what the earlier ones returned:
//
//  1. references (pipelineRefs): the RetryPolicy's plan and the DeadLetterQueue;
//  2. claims (pipelineClaim): what the pipeline may run on and manage, under the claim policy and
//     beside the other pipelines and the queues;
//  3. topics (pipelineTopics): its topics in Kafka, and which unused tiers drain;
//  4. figures (pipelineLive): lag, due lag, backlogs, dead letters;
//  5. children (pipelineChildren): the consumers' access and config, the autoscaler, the consumers,
//     their circuit reports, the alert rules.
//
// A problem that ends one of the first four ends them all (runPhases); the children run whatever
// those met. The status is then patched from all the results, and the requeues the phases ask for
// are merged (soonest).
func (r *ConsumerPipelineReconciler) reconcileNormal(ctx context.Context, p *retryv1alpha1.ConsumerPipeline) (ctrl.Result, error) {
	conn := r.pipelineConnection(p)
	run := r.runPhases(ctx, p, conn)
	r.recordTopicChanges(p, run.topics)
	kids, err := childrenFromStatus(p, run.topics), run.err
	if err == nil {
		kids, err = r.children(ctx, p, run)
	}
	owner := pipelineOwner(client.ObjectKeyFromObject(p))
	round := func() time.Duration { return r.Kafka.Offsets.UntilNextRound(conn.connKey, owner, r.RefreshInterval) }
	result, err := finishReconcile(err, allProblems(run, kids), func() error { return r.writeStatus(ctx, p, run, kids, conn.clusterID) }, func() time.Duration {
		// In phase with the connection's offsets rounds, so that the figures are at most one
		// interval old; sooner when a circuit report goes stale before.
		return soonest(round(), r.circuitRequeue(kids.circuit))
	})
	if err != nil {
		// The retry describes its topics fresh: what it read may be what failed it.
		r.Kafka.Topics.Unsettle(owner)
		return result, err
	}
	var draining, stalled time.Duration
	if len(kids.draining) > 0 || run.topics.awaitingRollout {
		// While tiers drain, or wait for the consumers' rollout to be deleted, the pipeline is looked
		// at again even when nothing else would requeue it, so that a drained tier goes without any
		// other event.
		draining = round()
	}
	if result.IsZero() {
		// Secrets are not watched: a pipeline waiting on one looks again at the resync.
		stalled = resyncWhileStalled(kafkaspec.SecretNames(p.Spec.Kafka), r.RefreshInterval)
	}
	// An idle pipeline wakes at its wake time whatever else the reconcile found.
	result.RequeueAfter = soonest(result.RequeueAfter, draining, stalled, kids.wakeAfter)
	return result, nil
}

// runPhases runs the finalizer, then the references, claims, topics and figures phases. A problem a
// phase returns ends them: it is added to the run's problems, and the later phases keep what the
// previous status gives. Another error ends them too, as a transient problem, and is run.err.
func (r *ConsumerPipelineReconciler) runPhases(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, conn *pipelineConnection) pipelineRun {
	run := pipelineRun{topics: topicsFromStatus(p, nil), refs: pipelineRefs{deadLetter: previousDeadLetter(p)}}
	ps := &run.problems
	var stop bool
	if stop, run.err = endStep(ps, named("Finalizer", r.addFinalizer(ctx, p))); stop {
		return run
	}
	refs, err := r.references(ctx, p, ps)
	if run.refs = refs; endRun(&run, err) {
		return run
	}
	claim, err := r.claims(ctx, p, run.refs, conn, ps)
	if run.claim = claim; claim.refused != nil {
		run.topics.withhold()
	}
	run.topics.owned = claim.owned
	if endRun(&run, err) {
		return run
	}
	topics, err := r.topics(ctx, p, run.refs, run.claim, conn, ps)
	if run.topics = topics; endRun(&run, err) {
		return run
	}
	run.live = r.figures(ctx, p, run.refs, run.topics, &conn.kafkaClient)
	return run
}

// endRun records err, the end of a phase, in run as endStep does, and says whether it ends the run.
func endRun(run *pipelineRun, err error) bool {
	stop, err := endStep(&run.problems, err)
	run.err = err
	if run.refused() != nil {
		run.live.withheld = true
	}
	return stop
}

// previousDeadLetter is the dead letter topic of the previous status.
func previousDeadLetter(p *retryv1alpha1.ConsumerPipeline) string {
	if p.Status.Topics == nil {
		return ""
	}
	return p.Status.Topics.DeadLetter
}

// writeStatus patches the status rebuilt from what the phases found, records the events of the
// conditions that changed, and sets the pipeline's gauges.
func (r *ConsumerPipelineReconciler) writeStatus(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, run pipelineRun, kids pipelineChildren, clusterID string) error {
	st := pipelineStatus(p, run, kids, clusterID)
	ps := allProblems(run, kids)
	if err := r.patchStatus(ctx, p, st, ps); err != nil {
		return err
	}
	r.warnLongMissing(p, ps, r.RefreshInterval)
	r.exportPipeline(client.ObjectKeyFromObject(p), st)
	return nil
}

// patchStatus writes st and records an event when Ready changed, or when a child condition became
// InvalidSpec.
func (r *ConsumerPipelineReconciler) patchStatus(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, st retryv1alpha1.ConsumerPipelineStatus, ps problems) error {
	before, ready, err := pipelineStatusWriter.patch(ctx, r.Client, r.Recorder, p, func(p *retryv1alpha1.ConsumerPipeline) { p.Status = st }, ps, "")
	if err != nil {
		return err
	}
	r.recordChildSpecErrors(p, before, st.Conditions, ready)
	return nil
}

// reconcileDelete removes the retry tiers the pipeline created when retryTopics.deletionPolicy is
// Delete (never the source topic: it holds the producers' data and may have other consumers, even
// when the operator created it), then the finalizer. As for queues, Kafka being unreachable delays
// deletion by at most DeletionTimeout.
func (r *ConsumerPipelineReconciler) reconcileDelete(ctx context.Context, p *retryv1alpha1.ConsumerPipeline) (ctrl.Result, error) {
	key := client.ObjectKeyFromObject(p)
	log := ctrl.LoggerFrom(ctx).WithValues("consumerPipeline", klog.KObj(p))
	letGo := func() (ctrl.Result, error) {
		return r.letGo(ctx, p, func() { r.gone(key) })
	}
	owned, err := r.ownedTopics(ctx, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	tiers := createdTiers(p, owned)
	if !controllerutil.ContainsFinalizer(p, topicFinalizer) || len(tiers) == 0 {
		return letGo()
	}
	if retryDeletionPolicy(p) != retryv1alpha1.DeletionPolicyDelete {
		log.Info("Kept retry topics", "topics", tiers)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Retry topics kept (retryTopics.deletionPolicy Retain): %s", strings.Join(tiers, ", "))
		return letGo()
	}
	conn := r.pipelineConnection(p)
	var ps problems
	blocked, err := r.blockedTopics(ctx, p, pipelineRefs{}, owned, r.selfParty(p, conn), &ps)
	if err != nil {
		return ctrl.Result{}, err
	}
	return r.deleteWithinBound(ctx, p, topicDeletion{
		topics:  tiers,
		delete:  func(ctx context.Context) error { return r.deleteTiers(ctx, conn, blocked, tiers) },
		deleted: "Retry topics deleted (retryTopics.deletionPolicy Delete): " + strings.Join(tiers, ", "),
		mayRemain: func(err string) string {
			return fmt.Sprintf("Gave up deleting retry topics after %s, they may remain in Kafka: %s", r.DeletionTimeout, err)
		},
		failing: func(ctx context.Context, err string, deadline time.Time) error {
			st := p.Status.DeepCopy()
			ps := append(ps, &problem{Reason: retryv1alpha1.ReasonDeleting, Message: fmt.Sprintf("deleting retry topics: %s; retrying until %s, then the pipeline goes and the topics may remain",
				err, deadline.UTC().Format(time.RFC3339))})
			setPipelineTopicsReady(st, p.Generation, ps, "")
			setPipelineReady(st, p.Generation)
			return r.patchStatus(ctx, p, *st, ps)
		},
	}, letGo)
}

// SetupWithManager registers the controller. Besides its pipelines it watches the RetryPolicies
// and DeadLetterQueues they reference (through the indexes of constants.go), other pipelines on
// the same source, in the same group or with the same tier base (otherPipelinesSharing), the
// ConfigMaps and Deployments it owns (drift is reverted at once), the
// PrometheusRule CRD (installing or removing it switches the kind of the alert rules) and, while
// that kind is served, the PrometheusRules it owns (see ruleapi.API).
func (r *ConsumerPipelineReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byIndex := func(index string) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
			return requestsFor(ctx, r.Client, &retryv1alpha1.ConsumerPipelineList{}, nil, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: o.GetName()})
		})
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&retryv1alpha1.ConsumerPipeline{}, builder.WithPredicates(specOrLifecycleChanged())).
		Watches(&retryv1alpha1.RetryPolicy{}, byIndex(indexPipelineByPolicy), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&retryv1alpha1.DeadLetterQueue{}, byIndex(indexPipelineByDLQ), builder.WithPredicates(createdOrDeleted())).
		Watches(&retryv1alpha1.DeadLetterQueue{}, r.deadLetterCountsChanged()).
		Watches(&retryv1alpha1.ConsumerPipeline{}, handler.EnqueueRequestsFromMapFunc(r.otherPipelinesSharing), builder.WithPredicates(createdOrDeleted())).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{})
	b = r.Rules.WatchCRD(b, r.Client, func() client.ObjectList { return &retryv1alpha1.ConsumerPipelineList{} })
	c, err := b.WithOptions(r.Controller).Named("consumerpipeline").Build(r)
	if err != nil {
		return err
	}
	r.Rules.Watch(c, mgr.GetScheme(), &retryv1alpha1.ConsumerPipeline{})
	return nil
}
