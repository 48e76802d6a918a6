package controllers

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/lease"
)

// dlqStates are the dead letters a queue holds counted by state, and the oldest pending one's time
// (zero when none is pending).
type dlqStates struct {
	counts        map[retryv1alpha1.DeadLetterState]int64
	oldestPending time.Time
}

// stateCountCache keeps each queue's last counts with the offsets they were computed at (the
// queue's and its record of decisions'): a refresh that finds both unchanged reads nothing. Entries
// are by the queue's UID and leased for a few refresh intervals: that of a queue deleted goes by
// itself.
type stateCountCache struct {
	queues lease.Map[types.UID, stateCountEntry]
}

type stateCountEntry struct {
	topicID string                   // the queue's topic's ID
	untidy  bool                     // the record of decisions holds what to tidy, not written: count again
	at      []kafka.PartitionOffsets // the queue's offsets, then the record of decisions'
	states  dlqStates
}

// get returns the counts of the queue uid if they were made for topicID at the offsets at.
func (c *stateCountCache) get(uid types.UID, topicID string, at []kafka.PartitionOffsets, now time.Time, interval time.Duration) (dlqStates, bool) {
	e, ok := c.queues.Get(uid, now, lease.For(interval))
	if !ok || e.untidy || e.topicID != topicID || !slices.Equal(e.at, at) {
		return dlqStates{}, false
	}
	return e.states, true
}

func (c *stateCountCache) set(uid types.UID, e stateCountEntry, now time.Time, interval time.Duration) {
	c.queues.Put(uid, e, now, lease.For(interval))
}

// topicID returns the topic ID the last counts of uid were made with, and whether there are any.
func (c *stateCountCache) topicID(uid types.UID, now time.Time, interval time.Duration) (string, bool) {
	e, ok := c.queues.Get(uid, now, lease.For(interval))
	return e.topicID, ok
}

// refreshStates is the states phase: it counts the dead letters held by state from the record of
// decisions, and finds the oldest pending one, when the queue or its record of decisions changed
// since the last count (at the offsets o, of the topics t). A failed read keeps status as it is,
// logged: nil is returned.
func (r *DeadLetterQueueReconciler) refreshStates(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, t dlqTopics, o dlqOffsets, live dlqLive, k *kafkaClient) (*dlqStates, error) {
	if !o.counted || t.stateTopic == "" || o.stateOffsets == nil {
		return nil, nil
	}
	key := client.ObjectKeyFromObject(dlq)
	at := append(slices.Clone(o.offsets), o.stateOffsets...)
	topicID := t.topicID()
	now := r.Clock.Now()
	if st, ok := r.stateCounts.get(dlq.UID, topicID, at, now, spec.interval); ok {
		return &st, nil
	}
	states, tidy, err := deadletters.Survey(ctx, k.admin, r.Kafka.Scanner, k.conn, spec.want.Name, topicID, o.offsets, deadletters.MaxTidyUpdates)
	untidy := false
	if err == nil {
		if last, ok := r.stateCounts.topicID(dlq.UID, now, spec.interval); ok && last == topicID {
			untidy = !r.tidyStates(ctx, dlq, spec, t, k, tidy)
		} else {
			untidy = len(tidy) > 0
			// First count, or the topic was created again since the last: the offsets (batched, up to
			// an interval old) may be the old topic's, so nothing is dropped by them this time.
			r.Kafka.Offsets.Forget(dlqOwner(key))
		}
		var st dlqStates
		st.counts = states.Counts(o.offsets)
		switch {
		case st.counts[retryv1alpha1.DeadLetterPending] == 0:
		case st.counts[retryv1alpha1.DeadLetterPending] == kafkastats.CountMessages(o.offsets) && live.breakdown != nil:
			// Nothing decided: the oldest pending is the oldest held, which the tally knows.
			st.oldestPending = live.breakdown.Oldest
		default:
			st.oldestPending, err = deadletters.OldestPending(ctx, r.Kafka.Scanner, k.conn, spec.want.Name, o.offsets, states)
		}
		if err == nil {
			r.stateCounts.set(dlq.UID, stateCountEntry{topicID: topicID, at: at, states: st, untidy: untidy}, now, spec.interval)
			return &st, nil
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	ctrl.LoggerFrom(ctx).Info("Could not read the record of decisions; the counts by state in status are left as they were",
		"deadLetterQueue", klog.KObj(dlq), "topic", t.stateTopic, "error", truncate(err.Error(), maxConditionMessage))
	return nil, nil
}

// tidyStates writes what Survey found to tidy in the record of decisions: tombstones for the
// decisions on records that are gone (or of an earlier incarnation of the topic), and the unbound
// decisions bound to the topic's ID; at most deadletters.MaxTidyUpdates a reconcile. The next
// reconcile sees the record of decisions changed and goes on. A failure is logged, and reported
// (false) so that the next reconcile counts and tries again.
func (r *DeadLetterQueueReconciler) tidyStates(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, t dlqTopics, k *kafkaClient, updates []deadletters.StateUpdate) bool {
	if len(updates) == 0 || r.Kafka.Producer == nil {
		return true
	}
	name := spec.want.Name
	if id := t.topicID(); id != "" {
		// As a Purge does: the topic deleted and created again since its ID was read would have the
		// decisions made on it dropped as another topic's.
		ids, err := k.admin.TopicIDs(ctx, name)
		if err != nil || ids[name] != id {
			ctrl.LoggerFrom(ctx).Info("Did not tidy the record of decisions: the topic's ID changed since it was read, or could not be read again",
				"deadLetterQueue", klog.KObj(dlq), "topic", t.stateTopic, "topicID", id, "now", ids[name], "error", err)
			return false
		}
	}
	written, err := deadletters.WriteStates(ctx, r.Kafka.Producer, k.conn, name, updates)
	n := 0
	for _, w := range written {
		if w {
			n++
		}
	}
	log := ctrl.LoggerFrom(ctx).WithValues("deadLetterQueue", klog.KObj(dlq), "topic", t.stateTopic, "written", n, "of", len(updates))
	if err != nil {
		log.Info("Could not tidy the record of decisions", "error", truncate(err.Error(), maxConditionMessage))
		return false
	}
	log.Info("Tidied the record of decisions: dropped the decisions on dead letters that are gone, bound the others to the topic's ID")
	return true
}

// forgetUnboundDecisions tombstones, before the queue's topic deleted out of band is created again,
// every decision recorded without a topic ID (all of them on brokers that give none): the new
// topic's dead letters reuse their offsets.
func (r *DeadLetterQueueReconciler) forgetUnboundDecisions(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, k *kafkaClient, stateHave kafka.TopicInfo) error {
	if !stateHave.Exists || r.Kafka.Producer == nil {
		return nil
	}
	unbound, err := deadletters.Unbound(ctx, k.admin, r.Kafka.Scanner, k.conn, spec.want.Name)
	if err != nil || len(unbound) == 0 {
		return err
	}
	if _, err := deadletters.WriteStates(ctx, r.Kafka.Producer, k.conn, spec.want.Name, unbound); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("Dropped the decisions without a topic ID before creating the topic again",
		"deadLetterQueue", klog.KObj(dlq), "topic", spec.want.Name, "dropped", len(unbound))
	return nil
}

// setDLQStates writes the counts by state, pending and the oldest pending time (to the second).
func setDLQStates(st *retryv1alpha1.DeadLetterQueueStatus, s *dlqStates) {
	if s == nil {
		return
	}
	pending := s.counts[retryv1alpha1.DeadLetterPending]
	st.Pending = &pending
	st.States = st.States[:0]
	for _, name := range []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending, retryv1alpha1.DeadLetterReplayed, retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnored} {
		st.States = append(st.States, retryv1alpha1.NamedCount{Name: string(name), Count: s.counts[name]})
	}
	st.OldestPendingTime = nil
	if !s.oldestPending.IsZero() {
		t := metav1.NewTime(s.oldestPending.Truncate(time.Second))
		st.OldestPendingTime = &t
	}
}
