package controllers

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/circuitstate"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
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

// pipelineScope is the state of one ConsumerPipeline reconcile, filled in by the steps. The figures
// start from the previous status, so that what a step could not find out this time keeps its value.
type pipelineScope struct {
	p *retryv1alpha1.ConsumerPipeline

	kafkaClient

	// From the RetryPolicy: the tiers the plan needs; planKnown is false when the policy is missing
	// or invalid, and then the tiers in status are left as they were.
	tiers     dispatchercfg.Tiers
	planKnown bool

	deadLetter string

	// managesSource is set when spec.source.create asks to and no other pipeline on the source
	// manages it (findSourceOwner); sourceOwner names the pipeline that does, when one does.
	managesSource bool
	sourceOwner   string
	// owned are the topics the ledger records for the pipeline (created or adopted), sorted.
	owned []string
	// blocked are topics a DeadLetterQueue claims: the pipeline leaves them alone.
	blocked map[string]bool

	described map[string]kafka.TopicInfo

	sourcePartitions int32
	retries          []retryv1alpha1.RetryTopicStatus
	unused           []string

	// draining are the unused tiers the dispatcher config lists under topics.draining, sorted
	// (consumerpipeline_draining.go); prevDraining are those of the previous status. drainingKnown is
	// set once the UnusedRetryTopics step found them out; until then draining is prevDraining, and
	// the ConfigMap step, if it runs, replaces it with keptDraining.
	draining      []string
	prevDraining  []string
	drainingKnown bool
	// awaitingRollout is set when a drained unused tier is kept, under Delete, until the consumer
	// Deployment has rolled out a config that no longer writes to it (consumersHold).
	awaitingRollout bool

	// changes made in Kafka, for one event at the end; created is set when a topic was created.
	changes []string
	created bool

	// topicProblems are the problems of the TopicsReady condition.
	topicProblems problems
	// claimRefused is the problem of a source topic or consumer group the claim policy refuses
	// (consumerpipeline_claims.go), or of a group or tiers another pipeline has
	// (consumerpipeline_fanout.go); nil when neither.
	claimRefused *problem

	// live is what the LiveFigures step found (consumerpipeline_live.go).
	live pipelineLive

	// The children (consumerpipeline_children.go). policy and queue are the referenced objects, nil
	// while missing (or, for the policy, invalid). deployment is the Deployment as the API server
	// has it (nil when there is none); configHash is the hash of the applied ConfigMap.
	policy        *retryv1alpha1.RetryPolicy
	queue         *retryv1alpha1.DeadLetterQueue
	configHash    string
	deployment    *appsv1.Deployment
	alertsMessage string
	// defaultConn is how the pods reach the default connection (consumerpipeline_identity.go); nil
	// when neither the pipeline nor its queue is on it. identityMissing is set when the namespace
	// lacks the consumer Secret it needs: then no config or Deployment is applied.
	defaultConn     *render.DefaultConnection
	identityMissing bool
	// circuit is the fold of the consumers' circuit reports; nil when they were not read.
	circuit *circuitstate.Summary
	// autoscaling is status.autoscaling (consumerpipeline_autoscaling.go), from the previous status
	// until the Autoscaling step runs; wakeAfter, when not zero, is when an idle pipeline must be
	// looked at again to wake.
	autoscaling *retryv1alpha1.PipelineAutoscalingStatus
	wakeAfter   time.Duration
	// scaling is set when the operator changed the Deployment's replicas for the autoscaler less
	// than scalingGrace ago (setPipelineDeploymentScaling).
	scaling bool
	// autoscalerTrouble is what the HPA's conditions say keeps it from scaling; empty when nothing.
	autoscalerTrouble  string
	deploymentProblems problems
	alertProblems      problems
}

// allProblems are the problems of every condition Ready summarises.
func (s *pipelineScope) allProblems() problems {
	all := append(problems{}, s.topicProblems...)
	all = append(all, s.alertProblems...)
	return append(all, s.deploymentProblems...)
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
	if ok, err := r.fetch(ctx, req, p, r.forget); !ok {
		return ctrl.Result{}, err
	}
	s := newPipelineScope(p)
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func newPipelineScope(p *retryv1alpha1.ConsumerPipeline) *pipelineScope {
	s := &pipelineScope{p: p, blocked: map[string]bool{}}
	if t := p.Status.Topics; t != nil {
		s.sourcePartitions = t.SourcePartitions
		s.retries = slices.Clone(t.Retries)
		s.unused = slices.Clone(t.UnusedRetries)
		s.prevDraining = slices.Clone(t.DrainingRetries)
		s.draining = slices.Clone(t.DrainingRetries)
		s.deadLetter = t.DeadLetter
	}
	s.autoscaling = p.Status.Autoscaling.DeepCopy()
	return s
}

// forget drops everything kept about a pipeline that is gone, its gauges included.
func (r *ConsumerPipelineReconciler) forget(key types.NamespacedName) {
	owner := pipelineOwner(key)
	apply.ForgetOwner("ConsumerPipeline", key.Namespace, key.Name)
	r.Kafka.Offsets.Forget(owner)
	r.Kafka.Topics.Forget(owner)
	r.Kafka.Commits.Forget(owner)
	r.Kafka.Due.Forget(owner)
	r.Kafka.Connections.Release(owner)
	if r.Metrics != nil {
		r.Metrics.DeleteConsumerPipeline(key.Namespace, key.Name)
	}
}

// reconcileNormal runs the topic steps, then the children; whatever they return, the status is then
// patched (deferred) from what they found. The topic steps find out which unused tiers drain before
// the children render the dispatcher config that lists them.
func (r *ConsumerPipelineReconciler) reconcileNormal(ctx context.Context, s *pipelineScope) (result ctrl.Result, reterr error) {
	defer func() {
		result, reterr = finishReconcile(reterr, s.allProblems(), func() error { return r.writeStatus(ctx, s) }, func() time.Duration {
			// In phase with the connection's offsets rounds, so that the figures are at most one
			// interval old; sooner when a circuit report goes stale before.
			after := r.Kafka.Offsets.UntilNextRound(s.connKey, pipelineOwner(client.ObjectKeyFromObject(s.p)), r.RefreshInterval)
			if c := r.circuitRequeue(s); c > 0 && c < after {
				after = c
			}
			return after
		})
		// While tiers drain, or wait for the consumers' rollout to be deleted, the pipeline is looked
		// at again even when nothing else would requeue it, so that a drained tier goes without any
		// other event.
		if reterr == nil && result.IsZero() && (len(s.draining) > 0 || s.awaitingRollout) {
			result.RequeueAfter = r.Kafka.Offsets.UntilNextRound(s.connKey, pipelineOwner(client.ObjectKeyFromObject(s.p)), r.RefreshInterval)
		}
		if reterr == nil && result.IsZero() {
			result.RequeueAfter = resyncWhileStalled(kafkaspec.SecretNames(s.p.Spec.Kafka), r.RefreshInterval)
		}
		if reterr != nil {
			// The retry describes its topics fresh: what it read may be what failed it.
			r.Kafka.Topics.Unsettle(pipelineOwner(client.ObjectKeyFromObject(s.p)))
		}
		// An idle pipeline wakes at its wake time whatever else the reconcile found.
		if reterr == nil && s.wakeAfter > 0 && (result.RequeueAfter <= 0 || s.wakeAfter < result.RequeueAfter) {
			result.RequeueAfter = s.wakeAfter
		}
	}()
	// A problem ends the topic steps and goes on TopicsReady.
	err := runSteps(ctx, s, []step[*pipelineScope]{
		{"Finalizer", func(ctx context.Context, s *pipelineScope) error { return r.addFinalizer(ctx, s.p) }},
		{"RetryPolicy", r.readPolicy},
		{"DeadLetterQueue", r.readDeadLetterQueue},
		{"ReadClaims", r.checkReadClaims},
		{"Sharing", r.checkSharing},
		{"Claims", r.checkClaims},
		{"Connection", r.connectPipeline},
		{"DescribeTopics", r.describeTopics},
		{"RecordTopics", r.recordNewTopics},
		{"SourceTopic", r.reconcileSourceTopic},
		{"RetryTopics", r.reconcileRetryTopics},
		{"UnusedRetryTopics", r.reconcileUnusedRetryTopics},
		{"LiveFigures", r.refreshLiveFigures},
	}, &s.topicProblems)
	r.recordTopicChanges(s)
	if err != nil {
		return ctrl.Result{}, err
	}
	// The children run whatever problems the topic steps met: they depend on the spec and the
	// referenced objects, not on Kafka.
	return ctrl.Result{}, r.reconcileChildren(ctx, s)
}

// writeStatus patches the status rebuilt from s, records the events of the conditions that changed,
// and sets the pipeline's gauges.
func (r *ConsumerPipelineReconciler) writeStatus(ctx context.Context, s *pipelineScope) error {
	st := pipelineStatus(s)
	ps := s.allProblems()
	if err := r.patchStatus(ctx, s.p, st, ps); err != nil {
		return err
	}
	r.warnLongMissing(s.p, ps)
	r.exportPipeline(client.ObjectKeyFromObject(s.p), st)
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
func (r *ConsumerPipelineReconciler) reconcileDelete(ctx context.Context, s *pipelineScope) (ctrl.Result, error) {
	p := s.p
	key := client.ObjectKeyFromObject(p)
	log := ctrl.LoggerFrom(ctx).WithValues("consumerPipeline", klog.KObj(p))
	letGo := func() (ctrl.Result, error) {
		return r.letGo(ctx, p, func() {
			r.Kafka.Connections.Release(pipelineOwner(key))
			r.forgetTemplate(p.UID)
		})
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
	if err := r.checkClaims(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	return r.deleteWithinBound(ctx, p, topicDeletion{
		topics:  tiers,
		delete:  func(ctx context.Context) error { return r.deleteTiers(ctx, s, tiers) },
		deleted: "Retry topics deleted (retryTopics.deletionPolicy Delete): " + strings.Join(tiers, ", "),
		mayRemain: func(err string) string {
			return fmt.Sprintf("Gave up deleting retry topics after %s, they may remain in Kafka: %s", r.DeletionTimeout, err)
		},
		failing: func(ctx context.Context, err string, deadline time.Time) error {
			st := p.Status.DeepCopy()
			s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonDeleting, Message: fmt.Sprintf("deleting retry topics: %s; retrying until %s, then the pipeline goes and the topics may remain",
				err, deadline.UTC().Format(time.RFC3339))})
			setPipelineTopicsReady(st, p.Generation, s.topicProblems, "")
			setPipelineReady(st, p.Generation)
			return r.patchStatus(ctx, p, *st, s.topicProblems)
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
