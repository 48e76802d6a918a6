package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// topicFinalizer guards the Kafka topics of DeadLetterQueues and ConsumerPipelines: it is added
// before the first Kafka side effect and removed once the deletion policy has been carried out, or
// once the deletion bound has passed with Kafka unreachable.
const topicFinalizer = "retry.retryops.dev/topic"

// indexDLQByClaim indexes DeadLetterQueues by claimKey(servers, topic), cluster-wide: topics are
// cluster-wide in Kafka, so queues in different namespaces can claim the same one.
const indexDLQByClaim = ".spec.topic.claim"

// Event reasons of Kafka side effects (condition reasons are in api/v1alpha1).
const (
	eventTopicCreated   = "TopicCreated"
	eventTopicRecreated = "TopicRecreated"
	eventTopicCorrected = "TopicCorrected"
	eventTopicDeleted   = "TopicDeleted"
	eventTopicKept      = "TopicKept"
	eventTopicMayRemain = "TopicMayRemain"
	eventRecordsTrimmed = "RecordsTrimmed"
)

// DeadLetterQueueReconciler keeps the Kafka topic of each DeadLetterQueue as specified (partitions,
// configs, retention by age and by count), reports its size in status, resolves two queues claiming
// one topic, and carries out the deletion policy.
type DeadLetterQueueReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
	Kafka    *kafkaAccess
	Clock    clock.PassiveClock
	// RefreshInterval is the resync period unless spec.statusRefreshInterval says otherwise.
	RefreshInterval time.Duration
	// DeletionTimeout bounds how long a deleting queue waits for Kafka before letting go.
	DeletionTimeout time.Duration
	// Controller are extra controller options (concurrency, rate limiter).
	Controller controller.Options
	// RuleLabels are extra labels on the alert rule objects.
	RuleLabels map[string]string
	// Rules knows whether PrometheusRule is served.
	Rules *ruleAPI
}

// kafkaAccess is what both topic controllers share: defaults, clients and the offsets batcher.
type kafkaAccess struct {
	Defaults    KafkaDefaults
	Connections *connectionRegistry
	Offsets     *offsetsCache
	// Live is what the live figures in status are read with (kafka_live.go).
	Live *liveFigures
}

// dlqScope is the state of one DeadLetterQueue reconcile, filled in by the steps.
type dlqScope struct {
	dlq      *v1.DeadLetterQueue
	interval time.Duration

	conn    kafka.Connection
	connKey string
	admin   kafka.Admin

	want  topicSpec
	topic *kafka.TopicInfo // as it is after this reconcile's changes; nil if not described

	offsets   []kafka.PartitionOffsets
	offsetsAt time.Time
	counted   bool // offsets were read this reconcile

	live dlqLive // what the LiveFigures step found (deadletterqueue_live.go)

	problems problems
}

// owner is the connection registry's name for q.
func dlqOwner(key types.NamespacedName) string { return "DeadLetterQueue/" + key.String() }

// Reconcile brings one queue's topic in line with its spec and refreshes its status.
func (r *DeadLetterQueueReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	dlq := &v1.DeadLetterQueue{}
	if err := r.Get(ctx, req.NamespacedName, dlq); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	s := &dlqScope{dlq: dlq, interval: r.RefreshInterval, want: dlqTopicSpec(dlq)}
	if d := dlq.Spec.StatusRefreshInterval; d != nil && d.Duration > 0 {
		s.interval = d.Duration
	}
	if !dlq.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, s)
	}
	return r.reconcileNormal(ctx, s)
}

func (r *DeadLetterQueueReconciler) forget(key types.NamespacedName) {
	r.Kafka.Offsets.Forget(key)
	r.Kafka.Live.forgetDLQ(key)
	r.Kafka.Connections.release(dlqOwner(key))
}

// reconcileNormal runs the steps, then patches status if it changed.
func (r *DeadLetterQueueReconciler) reconcileNormal(ctx context.Context, s *dlqScope) (ctrl.Result, error) {
	steps := []step[*dlqScope]{
		{"Finalizer", r.ensureFinalizer},
		{"Alerts", r.reconcileAlerts},
		{"Connection", r.connect},
		{"Claim", r.claimTopic},
		{"Topic", r.reconcileTopic},
		{"Offsets", r.readOffsets},
		{"Retention", r.enforceMaxMessages},
		{"LiveFigures", r.refreshLiveFigures},
	}
	if err := runSteps(ctx, s, steps, &s.problems); err != nil {
		return staleOrError(err)
	}
	before := s.dlq.Status.DeepCopy()
	st := dlqStatus(s)
	if err := r.patchStatus(ctx, s.dlq, st); err != nil {
		return staleOrError(err)
	}
	r.publishLiveFigures(ctx, s, before, st)
	if err := s.problems.transient(); err != nil {
		return ctrl.Result{}, err
	}
	if s.problems.userOnly() {
		return ctrl.Result{}, nil
	}
	// In phase with the connection's offsets rounds, so that the figures are at most one interval old.
	return ctrl.Result{RequeueAfter: r.Kafka.Offsets.UntilNextRound(s.connKey, s.interval)}, nil
}

// ensureFinalizer adds the finalizer before anything touches Kafka.
func (r *DeadLetterQueueReconciler) ensureFinalizer(ctx context.Context, s *dlqScope) error {
	return addFinalizer(ctx, r.Client, s.dlq)
}

// connect resolves spec.kafka and gets a client.
func (r *DeadLetterQueueReconciler) connect(ctx context.Context, s *dlqScope) error {
	conn, err := resolveConnection(ctx, r.Client, s.dlq.Namespace, s.dlq.Spec.Kafka, r.Kafka.Defaults)
	if err != nil {
		return err
	}
	admin, key, err := r.Kafka.Connections.admin(ctx, dlqOwner(client.ObjectKeyFromObject(s.dlq)), conn)
	if err != nil {
		return kafkaProblem(err)
	}
	s.conn, s.connKey, s.admin = conn, key, admin
	return nil
}

// claimTopic makes sure this queue is the oldest one claiming its topic; a newer one reports the
// conflict and leaves the topic alone.
func (r *DeadLetterQueueReconciler) claimTopic(ctx context.Context, s *dlqScope) error {
	winner, err := r.topicOwner(ctx, s.dlq)
	if err != nil {
		return err
	}
	if winner.UID == s.dlq.UID {
		return nil
	}
	r.Kafka.Offsets.Forget(client.ObjectKeyFromObject(s.dlq))
	return &problem{Reason: v1.ReasonTopicConflict, Kind: problemWaiting, Message: fmt.Sprintf(
		"topic %q is already managed by %s, created earlier; this queue leaves the topic alone until that one is deleted",
		s.want.Name, winner)}
}

// topicOwner returns the oldest queue claiming dlq's topic on dlq's cluster.
func (r *DeadLetterQueueReconciler) topicOwner(ctx context.Context, dlq *v1.DeadLetterQueue) (claimant, error) {
	list := &v1.DeadLetterQueueList{}
	key := claimKey(connectionServers(dlq.Spec.Kafka, r.Kafka.Defaults), string(dlq.Spec.Topic.Name))
	if err := r.List(ctx, list, client.MatchingFields{indexDLQByClaim: key}); err != nil {
		return claimant{}, err
	}
	cs := []claimant{claimantOf("DeadLetterQueue", dlq)}
	for i := range list.Items {
		if list.Items[i].UID != dlq.UID {
			cs = append(cs, claimantOf("DeadLetterQueue", &list.Items[i]))
		}
	}
	w, _ := claimWinner(cs)
	return w, nil
}

// reconcileTopic creates the topic, grows its partitions and sets its configs back when they
// drifted. More partitions than the spec asks for are reported, never "fixed".
func (r *DeadLetterQueueReconciler) reconcileTopic(ctx context.Context, s *dlqScope) error {
	got, err := s.admin.DescribeTopics(ctx, s.want.Name)
	if err != nil {
		return kafkaProblem(err)
	}
	have := got[s.want.Name]
	plan := planTopic(s.want, have)
	s.topic = &have
	if !plan.empty() {
		now, err := applyTopicPlan(ctx, s.admin, s.want, have, plan)
		s.topic = &now
		if err != nil {
			if errors.Is(err, kafka.ErrTopicExists) {
				// Created by someone else in between: look again at the next resync.
				return &problem{Reason: v1.ReasonReconciling, Kind: problemWaiting, Message: fmt.Sprintf("topic %q appeared while being created", s.want.Name)}
			}
			return kafkaProblem(err)
		}
		r.recordTopicChange(ctx, s.dlq, s.want, have, plan)
		if plan.Create {
			// A new topic holds nothing: no need to ask Kafka.
			empty := make([]kafka.PartitionOffsets, s.want.Partitions)
			for i := range empty {
				empty[i].Partition = int32(i)
			}
			r.Kafka.Offsets.Set(s.connKey, s.want.Name, empty)
		}
	}
	s.problems.add(shrinkProblem("topic", s.want, plan,
		fmt.Sprintf("set spec.topic.partitions to %d to accept them", plan.ShrinkFrom)))
	return nil
}

func (r *DeadLetterQueueReconciler) recordTopicChange(ctx context.Context, dlq *v1.DeadLetterQueue, want topicSpec, have kafka.TopicInfo, plan topicPlan) {
	what := plan.describe(want, have)
	reason := eventTopicCorrected
	if plan.Create {
		reason = eventTopicCreated
		if dlq.Status.Partitions > 0 {
			reason = eventTopicRecreated
			what = "recreated (it had been deleted out of band) with " + strconv.Itoa(int(want.Partitions)) + " partitions"
		}
	}
	ctrl.LoggerFrom(ctx).Info("Reconciled topic", "deadLetterQueue", klog.KObj(dlq), "topic", want.Name, "change", what)
	r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, reason, "ReconcileTopic", "Topic %s %s", want.Name, what)
}

// readOffsets reads the topic's offsets through the batcher.
func (r *DeadLetterQueueReconciler) readOffsets(ctx context.Context, s *dlqScope) error {
	po, at, err := r.Kafka.Offsets.Offsets(ctx, s.admin, s.connKey, client.ObjectKeyFromObject(s.dlq), s.want.Name, s.interval)
	if err != nil {
		return kafkaProblem(err)
	}
	s.offsets, s.offsetsAt, s.counted = po, at, true
	return nil
}

// enforceMaxMessages deletes the oldest records when the topic holds more than
// spec.retention.maxMessages (see trimPlan for how the deletion is spread over partitions).
func (r *DeadLetterQueueReconciler) enforceMaxMessages(ctx context.Context, s *dlqScope) error {
	ret := s.dlq.Spec.Retention
	if ret == nil || ret.MaxMessages == nil || !s.counted {
		return nil
	}
	before := trimPlan(s.offsets, *ret.MaxMessages)
	if len(before) == 0 {
		return nil
	}
	held := countMessages(s.offsets)
	if err := s.admin.DeleteRecordsBefore(ctx, s.want.Name, before); err != nil {
		return kafkaProblem(err)
	}
	for i := range s.offsets {
		if b, ok := before[s.offsets[i].Partition]; ok {
			s.offsets[i].Start = b
		}
	}
	r.Kafka.Offsets.Set(s.connKey, s.want.Name, s.offsets)
	left := countMessages(s.offsets)
	ctrl.LoggerFrom(ctx).Info("Trimmed dead letters", "deadLetterQueue", klog.KObj(s.dlq), "topic", s.want.Name, "deleted", held-left, "left", left)
	r.Recorder.Eventf(s.dlq, nil, corev1.EventTypeNormal, eventRecordsTrimmed, "EnforceRetention",
		"Deleted the %d oldest dead letters of topic %s to keep retention.maxMessages %d", held-left, s.want.Name, *ret.MaxMessages)
	return nil
}

// reconcileDelete carries out the deletion policy, then removes the finalizer. Kafka being
// unreachable never wedges deletion: after DeletionTimeout from the deletion timestamp the finalizer
// goes with a Warning event saying the topic may remain.
func (r *DeadLetterQueueReconciler) reconcileDelete(ctx context.Context, s *dlqScope) (ctrl.Result, error) {
	dlq := s.dlq
	key := client.ObjectKeyFromObject(dlq)
	log := ctrl.LoggerFrom(ctx).WithValues("deadLetterQueue", klog.KObj(dlq), "topic", s.want.Name)
	if !controllerutil.ContainsFinalizer(dlq, topicFinalizer) {
		r.forget(key)
		return ctrl.Result{}, nil
	}
	done := func() (ctrl.Result, error) {
		if err := removeFinalizer(ctx, r.Client, dlq); err != nil {
			return staleOrError(err)
		}
		r.forget(key)
		return ctrl.Result{}, nil
	}
	if dlq.Spec.DeletionPolicy != v1.DeletionPolicyDelete {
		log.Info("Kept topic")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept (deletionPolicy Retain)", s.want.Name)
		return done()
	}
	winner, err := r.topicOwner(ctx, dlq)
	if err != nil {
		return ctrl.Result{}, err
	}
	if winner.UID != dlq.UID {
		log.Info("Left topic to its owner", "owner", winner.String())
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicKept, "Delete", "Topic %s kept: it is managed by %s", s.want.Name, winner)
		return done()
	}

	deadline := deletionDeadline(dlq, r.DeletionTimeout)
	attemptCtx, cancel := deletionAttemptContext(ctx, r.Clock, deadline, dlq.Status.Conditions)
	defer cancel()
	err = errDeletionBoundPassed
	if attemptCtx != nil {
		err = r.deleteTopic(attemptCtx, s)
	}
	if err == nil {
		log.Info("Deleted topic")
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicDeleted, "Delete", "Topic %s deleted (deletionPolicy Delete)", s.want.Name)
		return done()
	}
	if errors.Is(err, errDeletionBoundPassed) {
		err = errors.New(lastDeletionError(dlq.Status.Conditions))
	}
	now := r.Clock.Now()
	if !now.Before(deadline) {
		log.Info("Gave up deleting topic", "error", err.Error())
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeWarning, eventTopicMayRemain, "Delete",
			"Gave up deleting topic %s after %s, the topic may remain in Kafka: %s", s.want.Name, r.DeletionTimeout, truncate(err.Error(), maxConditionMessage))
		return done()
	}
	st := dlq.Status.DeepCopy()
	s.problems.add(&problem{Reason: v1.ReasonDeleting, Message: fmt.Sprintf("deleting topic %q: %s; retrying until %s, then the queue goes and the topic may remain",
		s.want.Name, truncate(err.Error(), maxConditionMessage), deadline.UTC().Format(time.RFC3339))})
	setDLQReady(st, dlq.Generation, s.problems, "")
	if err := r.patchStatus(ctx, dlq, *st); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: min(deadline.Sub(now), deletionRetryStep)}, nil
}

// deletionRetryStep is the longest wait between two attempts to delete a topic.
const deletionRetryStep = 5 * time.Second

// deleteTopic connects and deletes the topic; any failure (a Secret gone, Kafka unreachable) is an
// error to retry within the deletion bound.
func (r *DeadLetterQueueReconciler) deleteTopic(ctx context.Context, s *dlqScope) error {
	if err := r.connect(ctx, s); err != nil {
		return err
	}
	return s.admin.DeleteTopic(ctx, s.want.Name)
}

// patchStatus writes st if it differs from the object's status, and records an event when Ready
// changed.
func (r *DeadLetterQueueReconciler) patchStatus(ctx context.Context, dlq *v1.DeadLetterQueue, st v1.DeadLetterQueueStatus) error {
	if equality.Semantic.DeepEqual(st, dlq.Status) {
		return nil
	}
	before := dlq.Status.Conditions
	// The optimistic lock makes a reconcile that read a stale cache fail instead of writing the same
	// status a second time (and recording its event twice); it is then retried on a fresh read.
	patch := client.MergeFromWithOptions(dlq.DeepCopy(), client.MergeFromWithOptimisticLock{})
	dlq.Status = st
	if err := r.Status().Patch(ctx, dlq, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	if c, changed := conditionChanged(before, st.Conditions, v1.ConditionReady); changed {
		log := ctrl.LoggerFrom(ctx)
		if c.Status == metav1.ConditionTrue {
			log.Info("Dead letter queue is ready", "deadLetterQueue", klog.KObj(dlq), "topic", st.Topic)
			r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, c.Reason, "Reconcile", "%s", c.Message)
		} else {
			log.Info("Dead letter queue is not ready", "deadLetterQueue", klog.KObj(dlq), "reason", c.Reason, "message", c.Message)
			r.Recorder.Eventf(dlq, nil, corev1.EventTypeWarning, c.Reason, "Reconcile", "%s", c.Message)
		}
	}
	return nil
}

// dlqTopicSpec is the topic a queue asks for. retention.maxAge becomes the topic's retention.ms.
func dlqTopicSpec(dlq *v1.DeadLetterQueue) topicSpec {
	t := dlq.Spec.Topic
	want := topicSpec{Name: string(t.Name), Partitions: t.Partitions, ReplicationFactor: -1, Configs: map[string]string{}}
	if want.Partitions == 0 {
		want.Partitions = 3
	}
	if t.ReplicationFactor != nil {
		want.ReplicationFactor = int16(*t.ReplicationFactor)
	}
	for k, v := range t.Config {
		want.Configs[k] = v
	}
	if ret := dlq.Spec.Retention; ret != nil && ret.MaxAge != nil {
		want.Configs["retention.ms"] = strconv.FormatInt(ret.MaxAge.Milliseconds(), 10)
	}
	return want
}

// SetupWithManager registers the controller. Besides its queues it watches the Secrets they
// reference (a rotated password is picked up at once) and other queues claiming the same topic (the
// loser of a conflict takes over as soon as the owner goes).
func (r *DeadLetterQueueReconciler) SetupWithManager(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).
		For(&v1.DeadLetterQueue{}, builder.WithPredicates(specOrLifecycleChanged())).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []ctrl.Request {
			return requestsForSecret(ctx, r.Client, o, &v1.DeadLetterQueueList{})
		})).
		Watches(&v1.DeadLetterQueue{}, handler.EnqueueRequestsFromMapFunc(r.otherClaimants), builder.WithPredicates(createdOrDeleted())).
		// The alert rules (alerts.go): the ConfigMap form, the CRD that switches the form, and while
		// it is served the PrometheusRules (ruleAPI.watch).
		Owns(&corev1.ConfigMap{})
	b = watchRuleCRD(b, r.Rules, r.Client, func() client.ObjectList { return &v1.DeadLetterQueueList{} })
	c, err := b.WithOptions(r.Controller).Named("deadletterqueue").Build(r)
	if err != nil {
		return err
	}
	r.Rules.watch(c, mgr.GetScheme(), &v1.DeadLetterQueue{})
	return nil
}

// otherClaimants maps a queue to the other queues claiming its topic.
func (r *DeadLetterQueueReconciler) otherClaimants(ctx context.Context, o client.Object) []ctrl.Request {
	dlq := o.(*v1.DeadLetterQueue)
	key := claimKey(connectionServers(dlq.Spec.Kafka, r.Kafka.Defaults), string(dlq.Spec.Topic.Name))
	return requestsForOthers(ctx, r.Client, dlq, &v1.DeadLetterQueueList{}, indexDLQByClaim, key)
}
