package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/circuitstate"
	dispatchercfg "github.com/retryops/retry-operator/internal/dispatcher/config"
	"github.com/retryops/retry-operator/internal/kafka"
)

// indexPipelineBySourceClaim indexes ConsumerPipelines by claimKey(servers, source topic),
// cluster-wide: pipelines on one source would share their <source>.retry.* topics.
const indexPipelineBySourceClaim = ".spec.source.claim"

// ConsumerPipelineReconciler makes what a ConsumerPipeline needs: its topics (the source topic,
// checked or created when spec.source.create asks, and the retry tiers of the referenced
// RetryPolicy's plan), then its children: the dispatcher ConfigMap, the consumer Deployment and the
// alert rules (see reconcileChildren).
type ConsumerPipelineReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
	Kafka    *kafkaAccess
	Clock    clock.PassiveClock
	// RefreshInterval is the resync period: drift in Kafka is corrected within one.
	RefreshInterval time.Duration
	// DeletionTimeout bounds how long a deleting pipeline waits for Kafka before letting go.
	DeletionTimeout time.Duration
	// Controller are extra controller options (concurrency, rate limiter).
	Controller controller.Options
	// DispatcherImage is the image of the dispatcher in sink mode.
	DispatcherImage string
	// RuleLabels are extra labels on the alert rule objects.
	RuleLabels map[string]string
	// Rules knows whether PrometheusRule is served.
	Rules *ruleAPI
	// CircuitReportInterval is how often consumers repeat a circuit report that is not Closed
	// (DefaultCircuitReportInterval when zero); three intervals make a report stale.
	CircuitReportInterval time.Duration
}

// pipelineScope is the state of one ConsumerPipeline reconcile, filled in by the steps. The figures
// start from the previous status, so that what a step could not find out this time keeps its value.
type pipelineScope struct {
	p       *v1.ConsumerPipeline
	servers []string

	conn    kafka.Connection
	connKey string
	admin   kafka.Admin

	// From the RetryPolicy: the tiers the plan needs; planKnown is false when the policy is missing
	// or invalid, and then the tiers in status are left as they were.
	tiers     dispatchercfg.Tiers
	planKnown bool

	deadLetter string

	// ownsTiers is false when an older pipeline on the same source manages the retry tiers.
	ownsTiers bool
	// blocked are topics a DeadLetterQueue claims: the pipeline leaves them alone.
	blocked map[string]bool

	described map[string]kafka.TopicInfo

	sourcePartitions int32
	retries          []v1.RetryTopicStatus
	unused           []string

	// changes made in Kafka, for one event at the end; created is set when a topic was created.
	changes []string
	created bool

	// topicProblems are the problems of the TopicsReady condition.
	topicProblems problems

	// live is what the LiveFigures step found (consumerpipeline_live.go).
	live pipelineLive

	// The children (consumerpipeline_children.go). policy and queue are the referenced objects, nil
	// while missing (or, for the policy, invalid). deployment is the Deployment as the API server
	// has it (nil when there is none); configHash is the hash of the applied ConfigMap.
	policy        *v1.RetryPolicy
	queue         *v1.DeadLetterQueue
	configHash    string
	deployment    *appsv1.Deployment
	alertsMessage string
	// circuit is the fold of the consumers' circuit reports; nil when they were not read.
	circuit            *circuitstate.Summary
	deploymentProblems problems
	alertProblems      problems
}

// allProblems are the problems of every condition Ready summarises.
func (s *pipelineScope) allProblems() problems {
	all := append(problems{}, s.topicProblems...)
	all = append(all, s.alertProblems...)
	return append(all, s.deploymentProblems...)
}

func pipelineOwner(key types.NamespacedName) string { return "ConsumerPipeline/" + key.String() }

// Reconcile brings one pipeline's topics in line with its spec and policy and refreshes its status.
func (r *ConsumerPipelineReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &v1.ConsumerPipeline{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) {
			r.Kafka.Live.forgetPipeline(r.Kafka.Offsets, req.NamespacedName)
			r.Kafka.Connections.release(pipelineOwner(req.NamespacedName))
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	s := newPipelineScope(p, r.Kafka.Defaults)
	if !p.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func newPipelineScope(p *v1.ConsumerPipeline, d KafkaDefaults) *pipelineScope {
	s := &pipelineScope{p: p, servers: connectionServers(p.Spec.Kafka, d), ownsTiers: true, blocked: map[string]bool{}}
	if t := p.Status.Topics; t != nil {
		s.sourcePartitions = t.SourcePartitions
		s.retries = slices.Clone(t.Retries)
		s.unused = slices.Clone(t.UnusedRetries)
		s.deadLetter = t.DeadLetter
	}
	return s
}

// reconcileNormal runs the steps, then patches status if it changed.
func (r *ConsumerPipelineReconciler) reconcileNormal(ctx context.Context, s *pipelineScope) (ctrl.Result, error) {
	steps := []step[*pipelineScope]{
		{"Finalizer", r.ensureFinalizer},
		{"RetryPolicy", r.readPolicy},
		{"DeadLetterQueue", r.readDeadLetterQueue},
		{"Claims", r.checkClaims},
		{"Connection", r.connect},
		{"DescribeTopics", r.describeTopics},
		{"SourceTopic", r.reconcileSourceTopic},
		{"RetryTopics", r.reconcileRetryTopics},
		{"UnusedRetryTopics", r.reconcileUnusedRetryTopics},
		{"LiveFigures", r.refreshLiveFigures},
	}
	// A problem ends the topic steps and goes on TopicsReady.
	if err := runSteps(ctx, s, steps, &s.topicProblems); err != nil {
		return staleOrError(err)
	}
	r.recordTopicChanges(s)
	// The children run whatever the topic steps met: they depend on the spec and the referenced
	// objects, not on Kafka.
	if err := r.reconcileChildren(ctx, s); err != nil {
		return staleOrError(err)
	}
	st := pipelineStatus(s)
	if err := r.patchStatus(ctx, s.p, st); err != nil {
		return staleOrError(err)
	}
	r.Kafka.Live.exportPipeline(client.ObjectKeyFromObject(s.p), st)
	all := s.allProblems()
	if err := all.transient(); err != nil {
		return ctrl.Result{}, err
	}
	if all.userOnly() {
		return ctrl.Result{}, nil
	}
	// In phase with the connection's offsets rounds, so that the figures are at most one interval old;
	// sooner when a circuit report goes stale before.
	after := r.Kafka.Offsets.UntilNextRound(s.connKey, r.RefreshInterval)
	if c := r.circuitRequeue(s); c > 0 && c < after {
		after = c
	}
	return ctrl.Result{RequeueAfter: after}, nil
}

func (r *ConsumerPipelineReconciler) ensureFinalizer(ctx context.Context, s *pipelineScope) error {
	return addFinalizer(ctx, r.Client, s.p)
}

// connect resolves spec.kafka and gets a client.
func (r *ConsumerPipelineReconciler) connect(ctx context.Context, s *pipelineScope) error {
	conn, err := resolveConnection(ctx, r.Client, s.p.Namespace, s.p.Spec.Kafka, r.Kafka.Defaults)
	if err != nil {
		return err
	}
	admin, key, err := r.Kafka.Connections.admin(ctx, pipelineOwner(client.ObjectKeyFromObject(s.p)), conn)
	if err != nil {
		return kafkaProblem(err)
	}
	s.conn, s.connKey, s.admin = conn, key, admin
	return nil
}

// reconcileDelete removes the retry tiers when retryTopics.deletionPolicy is Delete (never the
// source topic: it holds the producers' data and may have other consumers, even when the operator
// created it), then the finalizer. As for queues, Kafka being unreachable delays deletion by at most
// DeletionTimeout.
func (r *ConsumerPipelineReconciler) reconcileDelete(ctx context.Context, s *pipelineScope) (ctrl.Result, error) {
	p := s.p
	key := client.ObjectKeyFromObject(p)
	log := ctrl.LoggerFrom(ctx).WithValues("consumerPipeline", klog.KObj(p))
	if !controllerutil.ContainsFinalizer(p, topicFinalizer) {
		r.Kafka.Connections.release(pipelineOwner(key))
		return ctrl.Result{}, nil
	}
	done := func() (ctrl.Result, error) {
		if err := removeFinalizer(ctx, r.Client, p); err != nil {
			return staleOrError(err)
		}
		r.Kafka.Connections.release(pipelineOwner(key))
		return ctrl.Result{}, nil
	}
	tiers := pipelineTierNames(p.Status.Topics)
	if len(tiers) == 0 {
		return done()
	}
	if retryDeletionPolicy(p) != v1.DeletionPolicyDelete {
		log.Info("Kept retry topics", "topics", tiers)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Retry topics kept (retryTopics.deletionPolicy Retain): %s", strings.Join(tiers, ", "))
		return done()
	}
	if err := r.checkClaims(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	if !s.ownsTiers {
		log.Info("Left retry topics to their owner", "topics", tiers)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Retry topics kept: another pipeline on source %s manages them", p.Spec.Source.Topic)
		return done()
	}
	deadline := deletionDeadline(p, r.DeletionTimeout)
	attemptCtx, cancel := deletionAttemptContext(ctx, r.Clock, deadline, p.Status.Conditions)
	defer cancel()
	err := errDeletionBoundPassed
	if attemptCtx != nil {
		err = r.deleteTiers(attemptCtx, s, tiers)
	}
	if err == nil {
		log.Info("Deleted retry topics", "topics", tiers)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicDeleted, "Delete", "Retry topics deleted (retryTopics.deletionPolicy Delete): %s", strings.Join(tiers, ", "))
		return done()
	}
	if errors.Is(err, errDeletionBoundPassed) {
		err = errors.New(lastDeletionError(p.Status.Conditions))
	}
	now := r.Clock.Now()
	if !now.Before(deadline) {
		log.Info("Gave up deleting retry topics", "topics", tiers, "error", err.Error())
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, eventTopicMayRemain, "Delete",
			"Gave up deleting retry topics after %s, they may remain in Kafka: %s", r.DeletionTimeout, truncate(err.Error(), maxConditionMessage))
		return done()
	}
	st := p.Status.DeepCopy()
	s.topicProblems.add(&problem{Reason: v1.ReasonDeleting, Message: fmt.Sprintf("deleting retry topics: %s; retrying until %s, then the pipeline goes and the topics may remain",
		truncate(err.Error(), maxConditionMessage), deadline.UTC().Format(time.RFC3339))})
	setPipelineTopicsReady(st, p.Generation, s.topicProblems, "")
	setPipelineReady(st, p.Generation)
	if err := r.patchStatus(ctx, p, *st); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: min(deadline.Sub(now), deletionRetryStep)}, nil
}

// deleteTiers deletes the named retry topics, skipping any a DeadLetterQueue claims.
func (r *ConsumerPipelineReconciler) deleteTiers(ctx context.Context, s *pipelineScope, tiers []string) error {
	if err := r.connect(ctx, s); err != nil {
		return err
	}
	var errs []error
	for _, t := range tiers {
		if s.blocked[t] {
			continue
		}
		if err := s.admin.DeleteTopic(ctx, t); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// patchStatus writes st if it differs from the object's status, and records an event when Ready
// changed.
func (r *ConsumerPipelineReconciler) patchStatus(ctx context.Context, p *v1.ConsumerPipeline, st v1.ConsumerPipelineStatus) error {
	if equality.Semantic.DeepEqual(st, p.Status) {
		return nil
	}
	before := p.Status.Conditions
	// The optimistic lock makes a reconcile that read a stale cache fail instead of writing the same
	// status a second time (and recording its event twice); it is then retried on a fresh read.
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	p.Status = st
	if err := r.Status().Patch(ctx, p, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	c, changed := conditionChanged(before, st.Conditions, v1.ConditionReady)
	if changed {
		log := ctrl.LoggerFrom(ctx)
		if c.Status == metav1.ConditionTrue {
			log.Info("Pipeline is ready", "consumerPipeline", klog.KObj(p))
			r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, c.Reason, "Reconcile", "%s", c.Message)
		} else {
			log.Info("Pipeline is not ready", "consumerPipeline", klog.KObj(p), "reason", c.Reason, "message", c.Message)
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
		}
	} else {
		c = nil
	}
	r.recordChildSpecErrors(p, before, st.Conditions, c)
	return nil
}

// SetupWithManager registers the controller. Besides its pipelines it watches the RetryPolicies
// and DeadLetterQueues they reference (through the indexes of indexes.go), the Secrets of their Kafka
// connections, other pipelines on the same source (the loser of a tier conflict takes over as
// soon as the owner goes), the ConfigMaps and Deployments it owns (drift is reverted at once), the
// PrometheusRule CRD (installing or removing it switches the kind of the alert rules) and, while
// that kind is served, the PrometheusRules it owns (see ruleAPI).
func (r *ConsumerPipelineReconciler) SetupWithManager(mgr ctrl.Manager) error {
	byIndex := func(index string, name func(client.Object) string) handler.EventHandler {
		return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
			list := &v1.ConsumerPipelineList{}
			if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()), client.MatchingFields{index: name(o)}); err != nil {
				return nil
			}
			out := make([]ctrl.Request, 0, len(list.Items))
			for i := range list.Items {
				out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
			return out
		})
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1.ConsumerPipeline{}, builder.WithPredicates(specOrLifecycleChanged())).
		Watches(&v1.RetryPolicy{}, byIndex(indexPipelineByPolicy, client.Object.GetName), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1.DeadLetterQueue{}, byIndex(indexPipelineByDLQ, client.Object.GetName), builder.WithPredicates(createdOrDeleted())).
		Watches(&v1.DeadLetterQueue{}, r.deadLetterCountsChanged()).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
			return requestsForSecret(ctx, r.Client, o, &v1.ConsumerPipelineList{})
		})).
		Watches(&v1.ConsumerPipeline{}, handler.EnqueueRequestsFromMapFunc(r.otherPipelinesOnSource), builder.WithPredicates(createdOrDeleted())).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{})
	b = watchRuleCRD(b, r.Rules, r.Client, func() client.ObjectList { return &v1.ConsumerPipelineList{} })
	c, err := b.WithOptions(r.Controller).Named("consumerpipeline").Build(r)
	if err != nil {
		return err
	}
	r.Rules.watch(c, mgr.GetScheme(), &v1.ConsumerPipeline{})
	return nil
}

// otherPipelinesOnSource maps a pipeline to the other pipelines consuming the same source.
func (r *ConsumerPipelineReconciler) otherPipelinesOnSource(ctx context.Context, o client.Object) []ctrl.Request {
	p := o.(*v1.ConsumerPipeline)
	key := claimKey(connectionServers(p.Spec.Kafka, r.Kafka.Defaults), string(p.Spec.Source.Topic))
	return requestsForOthers(ctx, r.Client, p, &v1.ConsumerPipelineList{}, indexPipelineBySourceClaim, key)
}
