package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
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
	// Reason is the condition reason (a constant of api/v1alpha1).
	Reason string
	// Message says what is wrong and what to do, for the condition and the event.
	Message string
	// Kind says how the reconcile reacts.
	Kind problemKind
	// Err is the underlying error of a transient problem, returned from Reconcile.
	Err error
}

func (p *problem) Error() string { return p.Reason + ": " + p.Message }

// problems is the list of problems one reconcile met, in the order met.
type problems []*problem

// step is one named step of a reconcile of a scope S (a *pipelineScope, a *dlqScope).
type step[S any] struct {
	name string
	fn   func(context.Context, S) error
}

// runSteps runs steps in order. A step returning a *problem ends the run: the problem is added to
// ps and nil returned (with a nil ps it is returned like any error). Any other error ends the run
// and is returned with the step's name. Steps that can go on after a problem record it themselves
// and return nil.
func runSteps[S any](ctx context.Context, s S, steps []step[S], ps *problems) error {
	for _, st := range steps {
		err := st.fn(ctx, s)
		if err == nil {
			continue
		}
		var p *problem
		if ps != nil && errors.As(err, &p) {
			ps.add(p)
			return nil
		}
		return fmt.Errorf("%s: %w", st.name, err)
	}
	return nil
}

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

// topicSpec is a topic as the operator wants it.
type topicSpec struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16 // -1: the broker's default
	// Configs are the topic configs the operator keeps in place. Configs not listed are left alone.
	Configs map[string]string
}

// topicPlan is what must change for a topic to match its topicSpec.
type topicPlan struct {
	// Create is set when the topic does not exist.
	Create bool
	// GrowTo is the partition count to grow to, or 0.
	GrowTo int32
	// SetConfigs are the configs to set (incrementally).
	SetConfigs map[string]string
	// ShrinkFrom is the current partition count when it is above the wanted one (Kafka cannot
	// remove partitions), or 0.
	ShrinkFrom int32
}

// empty reports whether nothing needs to change in Kafka.
func (p topicPlan) empty() bool { return !p.Create && p.GrowTo == 0 && len(p.SetConfigs) == 0 }

// planTopic compares a topic as described with the wanted one.
func planTopic(want topicSpec, have kafka.TopicInfo) topicPlan {
	if !have.Exists {
		return topicPlan{Create: true}
	}
	var p topicPlan
	switch {
	case have.Partitions < want.Partitions:
		p.GrowTo = want.Partitions
	case have.Partitions > want.Partitions:
		p.ShrinkFrom = have.Partitions
	}
	for k, v := range want.Configs {
		if cur, ok := have.Configs[k]; !ok || cur != v {
			if p.SetConfigs == nil {
				p.SetConfigs = map[string]string{}
			}
			p.SetConfigs[k] = v
		}
	}
	return p
}

// describe says in words what the plan changes, for logs and events.
func (p topicPlan) describe(want topicSpec, have kafka.TopicInfo) string {
	var parts []string
	if p.Create {
		parts = append(parts, fmt.Sprintf("created with %d partitions", want.Partitions))
	}
	if p.GrowTo > 0 {
		parts = append(parts, fmt.Sprintf("grown from %d to %d partitions", have.Partitions, p.GrowTo))
	}
	if len(p.SetConfigs) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(p.SetConfigs)) {
			was, ok := have.Configs[k]
			if !ok {
				was = "unset"
			}
			kv = append(kv, fmt.Sprintf("%s=%s (was %s)", k, p.SetConfigs[k], was))
		}
		parts = append(parts, "config set back: "+strings.Join(kv, ", "))
	}
	return strings.Join(parts, "; ")
}

// applyTopicPlan makes the changes of plan in Kafka and returns the topic as it now is. A topic
// created by someone else between the describe and the create yields an error matching
// kafka.ErrTopicExists; callers look again at the next resync.
func applyTopicPlan(ctx context.Context, admin kafka.Admin, want topicSpec, have kafka.TopicInfo, plan topicPlan) (kafka.TopicInfo, error) {
	now := have
	if plan.Create {
		err := admin.CreateTopic(ctx, want.Name, want.Partitions, want.ReplicationFactor, want.Configs)
		if err != nil {
			return have, err
		}
		return kafka.TopicInfo{Name: want.Name, Exists: true, Partitions: want.Partitions, ReplicationFactor: want.ReplicationFactor,
			Configs: maps.Clone(want.Configs)}, nil
	}
	if plan.GrowTo > 0 {
		if err := admin.AddPartitions(ctx, want.Name, plan.GrowTo); err != nil {
			return have, err
		}
		now.Partitions = plan.GrowTo
	}
	if len(plan.SetConfigs) > 0 {
		if err := admin.AlterTopicConfigs(ctx, want.Name, plan.SetConfigs); err != nil {
			return now, err
		}
		now.Configs = maps.Clone(now.Configs)
		if now.Configs == nil {
			now.Configs = map[string]string{}
		}
		maps.Copy(now.Configs, plan.SetConfigs)
	}
	return now, nil
}

// shrinkProblem reports a topic with more partitions than wanted.
func shrinkProblem(what string, want topicSpec, plan topicPlan, fix string) *problem {
	if plan.ShrinkFrom == 0 {
		return nil
	}
	return &problem{Reason: v1.ReasonPartitionShrinkRefused, Kind: problemWaiting, Message: fmt.Sprintf(
		"%s %q has %d partitions and the spec asks for %d: Kafka cannot remove partitions, so the topic is left as it is; %s",
		what, want.Name, plan.ShrinkFrom, want.Partitions, fix)}
}

// claimKey identifies a topic on a cluster: the normalised bootstrap servers and the topic name.
// Two resources whose spec.kafka resolve to the same servers and name the same topic claim the same
// topic. (Different server lists that reach one cluster are not recognised: Kafka has no cheap
// cluster identity in the Admin interface.)
func claimKey(servers []string, topic string) string {
	return normalizeServers(servers) + "|" + topic
}

// claimant is a resource claiming a topic.
type claimant struct {
	Kind      string
	Namespace string
	Name      string
	UID       types.UID
	Created   time.Time
}

func claimantOf(kind string, o client.Object) claimant {
	return claimant{Kind: kind, Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID(), Created: o.GetCreationTimestamp().Time}
}

func (c claimant) String() string { return fmt.Sprintf("%s %s/%s", c.Kind, c.Namespace, c.Name) }

// olderThan orders claimants: the earlier creation timestamp first, then namespace, name and UID
// (creation timestamps have a one-second resolution).
func (c claimant) olderThan(o claimant) bool {
	if !c.Created.Equal(o.Created) {
		return c.Created.Before(o.Created)
	}
	if c.Namespace != o.Namespace {
		return c.Namespace < o.Namespace
	}
	if c.Name != o.Name {
		return c.Name < o.Name
	}
	return c.UID < o.UID
}

// claimWinner returns the oldest of the claimants, which owns the topic. ok is false without
// claimants.
func claimWinner(cs []claimant) (winner claimant, ok bool) {
	for i, c := range cs {
		if i == 0 || c.olderThan(winner) {
			winner = c
		}
	}
	return winner, len(cs) > 0
}

// conditionChanged tells whether a condition changed (status, reason or message): each such change
// is worth an event.
func conditionChanged(before []metav1.Condition, after []metav1.Condition, condType string) (*metav1.Condition, bool) {
	a := meta.FindStatusCondition(after, condType)
	return a, readyChanged(meta.FindStatusCondition(before, condType), a)
}

// deletionDeadline is when a deleting resource stops waiting for Kafka and lets go of its finalizer.
func deletionDeadline(o client.Object, bound time.Duration) time.Time {
	ts := o.GetDeletionTimestamp()
	if ts == nil {
		return time.Time{}
	}
	return ts.Add(bound)
}

// addFinalizer adds topicFinalizer to o if it lacks it. It runs before any Kafka side effect, so a
// topic is never made for an object that could vanish without the operator hearing of it.
func addFinalizer(ctx context.Context, c client.Client, o client.Object) error {
	if controllerutil.ContainsFinalizer(o, topicFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.AddFinalizer(o, topicFinalizer)
	return c.Patch(ctx, o, patch)
}

// removeFinalizer removes topicFinalizer from o.
func removeFinalizer(ctx context.Context, c client.Client, o client.Object) error {
	if !controllerutil.ContainsFinalizer(o, topicFinalizer) {
		return nil
	}
	patch := client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(o, topicFinalizer)
	return client.IgnoreNotFound(c.Patch(ctx, o, patch))
}

// specOrLifecycleChanged passes creations, deletions and updates that change the spec (generation),
// the annotations or the deletion timestamp. It drops the updates this operator's own writes cause
// (status, finalizer), which would otherwise trigger a second, idle reconcile that, on a cache not yet
// up to date, would even write the same status again.
func specOrLifecycleChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		}},
	)
}

// createdOrDeleted passes only creations and deletions.
func createdOrDeleted() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// errDeletionBoundPassed stands for "no new attempt: the deletion bound has passed".
var errDeletionBoundPassed = errors.New("deletion bound passed")

// deletionAttemptContext bounds one attempt to delete topics by the deletion deadline, so that no
// attempt runs past it. Once the deadline has passed, a resource that already failed an attempt (its
// condition says Deleting) makes no new one and ctx is nil; one that never tried (the operator was
// down, say) gets one attempt bounded by the Kafka request timeout.
func deletionAttemptContext(ctx context.Context, clk clock.PassiveClock, deadline time.Time, conditions []metav1.Condition) (context.Context, context.CancelFunc) {
	if clk.Now().Before(deadline) {
		return context.WithDeadline(ctx, deadline)
	}
	if c := meta.FindStatusCondition(conditions, v1.ConditionReady); c != nil && c.Reason == v1.ReasonDeleting {
		return nil, func() {}
	}
	return context.WithCancel(ctx)
}

// lastDeletionError is the failure recorded by the last attempt, for the final event.
func lastDeletionError(conditions []metav1.Condition) string {
	if c := meta.FindStatusCondition(conditions, v1.ConditionReady); c != nil && c.Reason == v1.ReasonDeleting {
		return c.Message
	}
	return "the deletion bound passed"
}

// staleRetry is how soon a reconcile that read a stale object is retried.
const staleRetry = 200 * time.Millisecond

// staleOrError turns a write conflict (the cache was behind) into a quick, quiet retry; other errors
// are returned for the work queue's backoff.
func staleOrError(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	return ctrl.Result{}, err
}
