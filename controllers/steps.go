package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/deletionbound"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/optimistic"
	"github.com/retryops/retry-operator/internal/render"
)

// problemKind says how a reconcile reacts to a problem.
type problemKind int

const (
	// problemWaiting: the condition goes False and the resource is looked at again at the next
	// resync (or sooner, when a watched object changes).
	problemWaiting problemKind = iota
	// problemUser: a mistake in the spec. The condition goes False with a Warning event and the
	// controller waits for a change instead of requeueing.
	problemUser
	// problemTransient: the condition goes False and the error is returned, so that the work queue
	// retries with backoff.
	problemTransient
)

// problem is a reason a condition is not True. It is an error so that reconcile steps can return
// it; a step that can go on after a problem records it instead.
type problem struct {
	// Reason is the condition reason (a constant of api/v1alpha1, or of constants.go).
	Reason string
	// Message says what is wrong and what to do, for the condition and the event.
	Message string
	// Kind says how the reconcile reacts.
	Kind problemKind
	// Err is the underlying error of a transient problem, returned from Reconcile.
	Err error
	// Progress marks a problem that goes away without anyone's help: something the resource needs
	// is being created alongside it (a referenced object, the queue's topic). Ready going False for
	// such problems alone is a Normal event, not a Warning.
	Progress bool
}

func (p *problem) Error() string { return p.Reason + ": " + p.Message }

// problems is the list of problems one reconcile met, in the order met.
type problems []*problem

// add records p (ignoring nil).
func (ps *problems) add(p *problem) {
	if p != nil {
		*ps = append(*ps, p)
	}
}

// condition returns the condition that summarises ps: True with trueReason and trueMessage when
// there is none, else False with the reason of the first problem and the messages of all of them.
func (ps problems) condition(condType string, generation int64, trueReason, trueMessage string) metav1.Condition {
	c := metav1.Condition{Type: condType, ObservedGeneration: generation}
	if len(ps) == 0 {
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, trueReason, trueMessage
		return c
	}
	var msgs []string
	for _, p := range ps {
		if !slices.Contains(msgs, p.Message) {
			msgs = append(msgs, p.Message)
		}
	}
	c.Status, c.Reason, c.Message = metav1.ConditionFalse, ps[0].Reason, truncate(strings.Join(msgs, "; "), maxConditionMessage)
	return c
}

// transient returns the error of the first transient problem, or nil.
func (ps problems) transient() error {
	for _, p := range ps {
		if p.Kind == problemTransient {
			if p.Err != nil {
				return p.Err
			}
			return p
		}
	}
	return nil
}

// userOnly reports whether every problem is a user error (and there is at least one).
func (ps problems) userOnly() bool {
	for _, p := range ps {
		if p.Kind != problemUser {
			return false
		}
	}
	return len(ps) > 0
}

// endStep says whether err, what a step (or a phase) returned, ends the run, and what to return
// from it. A *problem ends it: it is added to ps and nil returned. Any other error ends it too and
// is returned; it is added to ps as well, as a transient problem with reason ReconcileError, so that
// the condition the problems make says what failed while the work queue retries with backoff. A
// write conflict is the exception: the object read was stale, and so would be any condition built
// from it. Steps that can go on after a problem record it themselves and return nil.
func endStep(ps *problems, err error) (bool, error) {
	if err == nil {
		return false, nil
	}
	var p *problem
	if errors.As(err, &p) {
		ps.add(p)
		return true, nil
	}
	if !apierrors.IsConflict(err) {
		ps.add(&problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err,
			Message: truncate(err.Error(), maxConditionMessage)})
	}
	return true, err
}

// named prefixes err, unless it is nil or a *problem, with the name of the step that failed.
func named(name string, err error) error {
	var p *problem
	if err == nil || errors.As(err, &p) {
		return err
	}
	return fmt.Errorf("%s: %w", name, err)
}

// recordProblem adds err to ps when it is a *problem, and returns any other error.
func recordProblem(ps *problems, err error) error {
	var p *problem
	if errors.As(err, &p) {
		ps.add(p)
		return nil
	}
	return err
}

// kafkaProblem classifies an error from internal/kafka into a condition reason:
//   - authentication or authorisation failures: KafkaUnauthorized, transient (ACLs and credentials
//     change outside the resource, so the work queue retries with backoff);
//   - unreachable brokers, TLS failures, closed clients and retriable broker codes: KafkaUnavailable,
//     transient;
//   - an invalid connection: InvalidSpec, waiting for a change;
//   - any other broker error code (INVALID_CONFIG, INVALID_REPLICATION_FACTOR, POLICY_VIOLATION...):
//     KafkaRejected, retried at the next resync.
//
// The message is the broker's error text, which internal/kafka guarantees free of the password.
func kafkaProblem(err error) *problem {
	if err == nil {
		return nil
	}
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	msg := truncate(err.Error(), maxConditionMessage)
	var cfg *kafka.ConfigError
	switch {
	case kafka.IsAuthError(err):
		return &problem{Reason: retryv1alpha1.ReasonKafkaUnauthorized, Kind: problemTransient, Message: msg, Err: err}
	case kafka.IsUnreachable(err), kafka.IsTLSError(err), kafka.KindOf(err) == kafka.KindClosed:
		return &problem{Reason: retryv1alpha1.ReasonKafkaUnavailable, Kind: problemTransient, Message: msg, Err: err}
	case errors.As(err, &cfg):
		return &problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: msg}
	case kafka.IsRetriable(err):
		return &problem{Reason: retryv1alpha1.ReasonKafkaUnavailable, Kind: problemTransient, Message: msg, Err: err}
	case kafka.CodeOf(err) != "":
		return &problem{Reason: retryv1alpha1.ReasonKafkaRejected, Kind: problemWaiting, Message: msg}
	default:
		return &problem{Reason: retryv1alpha1.ReasonKafkaUnavailable, Kind: problemTransient, Message: msg, Err: err}
	}
}

// connectionProblem turns a *kafkaspec.Error into a problem: a missing Secret or key is waited for
// (ReferenceNotFound), an unusable connection is a spec error (InvalidSpec). Other errors come from
// the API server and are returned as they are.
func connectionProblem(err error) error {
	var e *kafkaspec.Error
	switch {
	case !errors.As(err, &e):
		return err
	case e.Missing:
		return &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: e.Message}
	default:
		return &problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: e.Message}
	}
}

// childProblem turns the errors of rendering and applying a child into problems: a spec error
// found while rendering (*render.SpecError), or an object the API server rejects as invalid, is a
// user error (InvalidSpec, wait for a change); an object of the child's name owned by another
// controller is waited for (ChildConflict). Anything else is returned as it is.
func childProblem(err error) error {
	var se *render.SpecError
	var conflict *apply.ConflictError
	switch {
	case errors.As(err, &se):
		return &problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: truncate(se.Error(), maxConditionMessage)}
	case errors.As(err, &conflict):
		return &problem{Reason: retryv1alpha1.ReasonChildConflict, Kind: problemWaiting, Message: conflict.Error()}
	case apierrors.IsInvalid(err):
		return &problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: truncate(err.Error(), maxConditionMessage)}
	}
	return err
}

// shrinkProblem reports a topic with more partitions than wanted.
func shrinkProblem(what string, want kafka.TopicSpec, plan kafka.TopicPlan, fix string) *problem {
	if plan.ShrinkFrom == 0 {
		return nil
	}
	return &problem{Reason: retryv1alpha1.ReasonPartitionShrinkRefused, Kind: problemWaiting, Message: fmt.Sprintf(
		"%s %q has %d partitions and the spec asks for %d: Kafka cannot remove partitions, so the topic is left as it is; %s",
		what, want.Name, plan.ShrinkFrom, want.Partitions, fix)}
}

// truncate cuts s to at most n bytes, on a rune boundary, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := max(n-3, 0)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// statusWriter writes the status of one kind, and words a change of its Ready condition in the
// log and the events.
type statusWriter[O client.Object] struct {
	// conditions are an object's status conditions.
	conditions func(O) []metav1.Condition
	// logKey is the log key of the object ("deadLetterQueue").
	logKey string
	// ready and notReady are the log messages.
	ready, notReady string
	// action is the events' action.
	action string
	// quiet, when set, says which changes of a True Ready are not worth an event (the log still
	// has them).
	quiet func(before, after *metav1.Condition) bool
}

// patch writes the status set gives obj (optimistic.PatchStatus) and, when that changed Ready
// (status, reason or message: each such change is worth an event), logs it and records an event:
// Normal with note (the condition's message when empty) and kv in the log when True, with the
// message otherwise: Normal when that is progress (ps.progress), else Warning, and none for a
// resource not Ready yet that is merely on its way (a progress reason, no problem). ps are the problems
// the status was built from. It returns the conditions before, and Ready when it changed.
func (w statusWriter[O]) patch(ctx context.Context, c client.Client, rec recorder.EventRecorder, obj O, set func(O), ps problems, note string, kv ...any) ([]metav1.Condition, *metav1.Condition, error) {
	before := w.conditions(obj)
	written, err := optimistic.PatchStatus(ctx, c, obj, set)
	if err != nil || !written {
		return before, nil, err
	}
	ready, changed := conditionChanged(before, w.conditions(obj), retryv1alpha1.ConditionReady)
	if !changed {
		return before, nil, nil
	}
	log := ctrl.LoggerFrom(ctx)
	if ready.Status == metav1.ConditionTrue {
		log.Info(w.ready, append([]any{w.logKey, klog.KObj(obj)}, kv...)...)
		if w.quiet != nil && w.quiet(meta.FindStatusCondition(before, retryv1alpha1.ConditionReady), ready) {
			return before, ready, nil
		}
		if note == "" {
			note = ready.Message
		}
		rec.Eventf(obj, nil, corev1.EventTypeNormal, ready.Reason, w.action, "%s", note)
	} else {
		log.Info(w.notReady, w.logKey, klog.KObj(obj), "reason", ready.Reason, "message", ready.Message)
		if ps.onWayToFirstReady(before, ready) {
			return before, ready, nil
		}
		eventType := corev1.EventTypeWarning
		if ps.progress(ready) {
			eventType = corev1.EventTypeNormal
		}
		rec.Eventf(obj, nil, eventType, ready.Reason, w.action, "%s", ready.Message)
	}
	return before, ready, nil
}

// fetch reads the object of req into obj. ok is false when there is nothing to reconcile: the
// object is gone (then gone is called) or the read failed (err).
func (r *topicReconciler) fetch(ctx context.Context, req ctrl.Request, obj client.Object, gone func(types.NamespacedName)) (ok bool, err error) {
	if err := r.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone, maybe without its finalizer (removed by hand).
			gone(req.NamespacedName)
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// addFinalizer adds topicFinalizer to o if it lacks it. It runs before any Kafka side effect, so a
// topic is never made for an object that could vanish without the operator hearing of it.
func (r *topicReconciler) addFinalizer(ctx context.Context, o client.Object) error {
	return optimistic.AddFinalizer(ctx, r.Client, o, topicFinalizer)
}

// letGo removes topicFinalizer from o, then calls gone.
func (r *topicReconciler) letGo(ctx context.Context, o client.Object, gone func()) (ctrl.Result, error) {
	if err := optimistic.RemoveFinalizer(ctx, r.Client, o, topicFinalizer); err != nil {
		return staleOrError(err)
	}
	// Best effort: a record left behind names topics of a UID that no longer exists, which no
	// resource can ever own again; the finalizer must not wait on it.
	if err := r.Ledger.Drop(ctx, o.GetUID()); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Could not drop the topic ledger's record", "uid", o.GetUID())
	}
	gone()
	return ctrl.Result{}, nil
}

// ownedTopics are the topics the operator created (or adopted) for o, sorted, as the topic ledger
// records them (kafkaspec.Ledger): never read from o itself, whose author could forge them.
func (r *topicReconciler) ownedTopics(ctx context.Context, o client.Object) ([]string, error) {
	return r.Ledger.Topics(ctx, o)
}

// recordCreatedTopics adds names to the topics owned by o, before they are created or adopted.
func (r *topicReconciler) recordCreatedTopics(ctx context.Context, o client.Object, names ...string) error {
	return r.Ledger.Record(ctx, o, names...)
}

// forgetCreatedTopics removes names, deleted, from the topics owned by o.
func (r *topicReconciler) forgetCreatedTopics(ctx context.Context, o client.Object, names ...string) error {
	return r.Ledger.Forget(ctx, o, names...)
}

// claimProblem reports a topic the resource o may not make the operator create or adopt, as a user
// error naming the rule: one the manager's topic claim policy (--topic-prefix) does not give its
// namespace, or one named like a record of decisions (<queue topic>.state) but o's own, o being
// that queue. Whatever writes a queue's record of decisions makes decisions: another queue holding
// it would receive its pipelines' dead letters there, trim, reconfigure or delete it, and a
// pipeline would reconfigure it as its source.
func (r *topicReconciler) claimProblem(o client.Object, topic string) *problem {
	if queueTopic, ok := strings.CutSuffix(topic, deadletters.StateTopicSuffix); ok {
		if q, isQueue := o.(*retryv1alpha1.DeadLetterQueue); !isQueue || string(q.Spec.Topic.Name) != queueTopic || strings.HasSuffix(queueTopic, deadletters.StateTopicSuffix) {
			return &problem{Reason: retryv1alpha1.ReasonTopicClaimRefused, Kind: problemUser, Message: fmt.Sprintf(
				"topic %q is named like a queue's record of decisions (<queue topic>%s), which only the operator writes, for that queue alone: "+
					"no other resource creates or adopts it; name another topic", topic, deadletters.StateTopicSuffix)}
		}
	}
	if err := r.Kafka.Defaults.CheckClaim(o.GetNamespace(), topic); err != nil {
		return &problem{Reason: retryv1alpha1.ReasonTopicClaimRefused, Kind: problemUser, Message: err.Error()}
	}
	return nil
}

// kafkaClient is the Kafka connection of one reconcile, once resolved: the connection, its key and
// its admin client.
type kafkaClient struct {
	conn    kafka.Connection
	connKey string
	admin   kafka.Admin
	// clusterID is the cluster ID read through admin this reconcile, for status.kafkaClusterID;
	// "" when none was.
	clusterID string
}

// connect resolves spec (the spec.kafka of a resource in namespace) into k, with a client for owner
// (the resource's name in the connection registry).
func (r *topicReconciler) connect(ctx context.Context, k *kafkaClient, owner, namespace string, spec *retryv1alpha1.KafkaConnection) error {
	conn, err := kafkaspec.Resolve(ctx, r.Client, namespace, spec, r.Kafka.Defaults)
	if err != nil {
		return connectionProblem(err)
	}
	admin, key, err := r.Kafka.Connections.Admin(ctx, owner, conn)
	if err != nil {
		return kafkaProblem(err)
	}
	k.conn, k.connKey, k.admin = conn, key, admin
	return nil
}

// topicDeletion is one kind's deletion of its topics under deletionPolicy Delete.
type topicDeletion struct {
	// topics are the topics deleted, for the log.
	topics []string
	// delete connects and deletes them; any failure (a Secret gone, Kafka unreachable) is retried
	// within the deletion bound.
	delete func(context.Context) error
	// deleted is the note of the event once they are gone; mayRemain the note of the Warning event
	// when the bound passed, given the last error.
	deleted   string
	mayRemain func(err string) string
	// failing writes the status after a failed attempt: the error, and when the retries stop.
	failing func(ctx context.Context, err string, deadline time.Time) error
}

// deleteWithinBound carries out d without ever letting Kafka wedge the deletion of obj: every
// attempt is bounded by the deletion deadline (DeletionTimeout after the deletion timestamp); a
// failed one is recorded (annotationDeletionFailure, and the status through d.failing) and tried
// again; once the deadline has passed, obj lets go (letGo) with a Warning event saying the topics
// may remain.
func (r *topicReconciler) deleteWithinBound(ctx context.Context, obj client.Object, d topicDeletion, letGo func() (ctrl.Result, error)) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx).WithValues("topics", d.topics)
	deadline := deletionbound.Deadline(obj, r.DeletionTimeout)
	failure, failed := obj.GetAnnotations()[annotationDeletionFailure]
	attemptCtx, cancel := deletionbound.Attempt(ctx, r.Clock, deadline, failed)
	defer cancel()
	err := deletionbound.ErrPassed
	if attemptCtx != nil {
		err = d.delete(attemptCtx)
	}
	if err == nil {
		log.Info("Deleted topics")
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, eventTopicDeleted, "Delete", "%s", d.deleted)
		return letGo()
	}
	if errors.Is(err, deletionbound.ErrPassed) {
		err = errors.New(deletionbound.LastError(failure, failed))
	}
	msg := truncate(err.Error(), maxConditionMessage)
	now := r.Clock.Now()
	if !now.Before(deadline) {
		log.Info("Gave up deleting topics", "error", err.Error())
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, eventTopicMayRemain, "Delete", "%s", d.mayRemain(msg))
		return letGo()
	}
	if err := optimistic.SetAnnotation(ctx, r.Client, obj, annotationDeletionFailure, msg); err != nil {
		return staleOrError(err)
	}
	if err := d.failing(ctx, msg, deadline); err != nil {
		return staleOrError(err)
	}
	return ctrl.Result{RequeueAfter: min(deadline.Sub(now), deletionRetryStep)}, nil
}
