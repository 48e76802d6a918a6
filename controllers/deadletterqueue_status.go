package controllers

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/render"
)

// dlqStatus rebuilds a queue's status from what the reconcile saw. Figures it could not read this
// time (Kafka unreachable, a conflict, a failed read of the new dead letters) keep their previous
// values rather than dropping to zero.
func dlqStatus(dlq *retryv1alpha1.DeadLetterQueue, run *dlqRun) retryv1alpha1.DeadLetterQueueStatus {
	st := *dlq.Status.DeepCopy()
	st.ObservedGeneration = dlq.Generation
	st.Topic = run.spec.want.Name
	if id := run.conn.clusterID; id != "" {
		st.KafkaClusterID = id
	}
	if t := run.topics.stateTopic; t != "" {
		st.StateTopic = t
	}
	o := run.offsets
	setDLQFigures(&st, run.topics.topic, o.offsets, o.counted, o.at)
	setDLQBreakdown(&st, run.live.breakdown, o.at)
	setDLQStates(&st, run.states)
	setDLQReady(&st, dlq.Generation, run.problems, dlqReadyMessage(run.spec.want, run.topics.topic))
	setStalled(&st.Conditions, dlq.Generation, run.problems)
	setDLQHealthy(&st, dlq.Generation, render.DeadLetterQueueAlertThresholds(dlq), run.live.growth,
		figuresAge{now: run.live.now, readAt: run.live.figuresAt, staleAfter: staleRefreshes * run.spec.interval})
	return st
}

// setDLQFigures writes the partition count and the number of messages held. lastRefreshTime moves
// only when a figure changed, so that a resync that finds nothing new writes nothing: it is the time
// of the read that produced the figures shown.
func setDLQFigures(st *retryv1alpha1.DeadLetterQueueStatus, topic *kafka.TopicInfo, offsets []kafka.PartitionOffsets, counted bool, at time.Time) {
	changed := false
	if topic != nil && topic.Exists && topic.Partitions != st.Partitions {
		st.Partitions, changed = topic.Partitions, true
	}
	if counted {
		if n := kafkastats.CountMessages(offsets); st.Messages == nil || n != *st.Messages {
			st.Messages, changed = &n, true
		}
	}
	if changed && counted {
		t := metav1.NewTime(at)
		st.LastRefreshTime = &t
	}
}

// setDLQBreakdown writes what the tally of the records held says: the oldest and newest record
// times (to the second, as the API keeps them) and the counts by reason, error type and pipeline, each the 20 largest (ties by name). A nil
// breakdown (not read this time) leaves them as they are. Like setDLQFigures, it moves
// lastRefreshTime to at only when one of them changed.
//
// status.messages stays end minus start offsets (setDLQFigures), what the alert rules count. The
// tally counts the records it read, which is the same number once every record was read, except in
// a topic written transactionally: commit markers and aborted records take offsets but are no dead
// letters, so there the breakdown sums to less than messages.
func setDLQBreakdown(st *retryv1alpha1.DeadLetterQueueStatus, b *kafkastats.Breakdown, at time.Time) {
	if b == nil {
		return
	}
	changed := false
	setTime := func(dst **metav1.Time, t time.Time) {
		var want *metav1.Time
		if !t.IsZero() {
			// metav1.Time keeps whole seconds: compare what the API server stores.
			want = &metav1.Time{Time: t.UTC().Truncate(time.Second)}
		}
		if (*dst == nil) != (want == nil) || (want != nil && !(*dst).Time.Equal(want.Time)) {
			*dst, changed = want, true
		}
	}
	setCounts := func(dst *[]retryv1alpha1.NamedCount, counts []kafkastats.Count) {
		want := namedCounts(counts, maxBreakdownEntries)
		if !slices.Equal(*dst, want) {
			*dst, changed = want, true
		}
	}
	setTime(&st.OldestMessageTime, b.Oldest)
	setTime(&st.NewestMessageTime, b.Newest)
	setCounts(&st.Reasons, b.Reasons)
	setCounts(&st.ErrorTypes, b.ErrorTypes)
	setCounts(&st.Pipelines, b.Pipelines)
	if changed {
		t := metav1.NewTime(at)
		st.LastRefreshTime = &t
	}
}

// namedCounts converts the first limit counts (nil when there are none). Names come from record
// headers anyone can write: they are cut to the API's 253 characters.
func namedCounts(counts []kafkastats.Count, limit int) []retryv1alpha1.NamedCount {
	if len(counts) > limit {
		counts = counts[:limit]
	}
	if len(counts) == 0 {
		return nil
	}
	out := make([]retryv1alpha1.NamedCount, len(counts))
	for i, c := range counts {
		name := c.Name
		if r := []rune(name); len(r) > maxNamedCountName {
			name = string(r[:maxNamedCountName])
		}
		out[i] = retryv1alpha1.NamedCount{Name: name, Count: c.Count}
	}
	return out
}

// maxNamedCountName is the API's bound on retryv1alpha1.NamedCount.Name.
const maxNamedCountName = 253

// staleRefreshes is how many refresh intervals old the figures of a status may be before the
// conditions judged on them are Unknown: a refresh that works shows figures at most about one
// interval old (the batched reads' snapshots), so two means at least one refresh was missed.
const staleRefreshes = 2

// figuresAge says how old the figures in a status are: read at readAt (zero: not since the manager
// started), judged at now, stale after staleAfter.
type figuresAge struct {
	now, readAt time.Time
	staleAfter  time.Duration
}

// stale reports whether the figures are too old to judge by.
func (a figuresAge) stale() bool {
	return a.readAt.IsZero() || a.now.Sub(a.readAt) > a.staleAfter
}

// staleMessage says how old the figures are and what that means.
func (a figuresAge) staleMessage() string {
	const unknown = "whether an alert threshold is crossed is not known until they are read again"
	if a.readAt.IsZero() {
		return "the figures in status have not been read since the manager started (see Ready): " + unknown
	}
	// No "ago": the message stays the same while the outage lasts, so status is not rewritten.
	return fmt.Sprintf("the figures were last read at %s, more than %d refresh intervals (%s) ago (see Ready): %s",
		a.readAt.UTC().Format(time.RFC3339), staleRefreshes, shortDuration(a.staleAfter), unknown)
}

// setDLQHealthy sets Healthy from the figures of st and the growth rate, against the thresholds of
// spec.alerts (with the defaults the alert rules use):
//   - False when one is crossed now, with the reason of the most severe crossing: FastGrowth (net
//     growth above maxGrowthPerMinute over the alert's window; the alert is critical), then
//     TooManyMessages (more than maxMessages held), then OldMessages (the oldest held is older than
//     maxOldestAge); the message names every crossing;
//   - True with reason Healthy when none is;
//   - Unknown while the queue has never been counted, and (reason FiguresStale) while its figures
//     are stale: read more than staleRefreshes refresh intervals ago, or not since the manager
//     started (Kafka unreachable, say); figures nobody can read cross no threshold, nor are they
//     known not to.
//
// The condition reflects the crossing as of the last refresh. The alert rules on the same
// thresholds wait their `for` durations (maxMessagesFor, maxGrowthFor, 5m for the age) before
// firing, so the condition turns False first and the alert follows only if the crossing lasts.
func setDLQHealthy(st *retryv1alpha1.DeadLetterQueueStatus, generation int64, th render.DeadLetterQueueThresholds, growth growthRate, age figuresAge) {
	c := metav1.Condition{Type: retryv1alpha1.ConditionHealthy, ObservedGeneration: generation}
	switch {
	case st.Messages == nil:
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, retryv1alpha1.ReasonReconciling, "the dead letters have not been counted yet"
	case age.stale():
		c.Status, c.Reason, c.Message = metav1.ConditionUnknown, retryv1alpha1.ReasonFiguresStale, age.staleMessage()
	}
	if c.Status != "" {
		meta.SetStatusCondition(&st.Conditions, c)
		return
	}
	now := age.now
	var reasons, messages []string
	if growth.known && growth.perMinute > float64(th.MaxGrowthPerMinute) {
		reasons = append(reasons, retryv1alpha1.ReasonFastGrowth)
		messages = append(messages, fmt.Sprintf("grew by %s dead letters per minute over the last %s, more than maxGrowthPerMinute %d",
			strconv.FormatFloat(growth.perMinute, 'f', 1, 64), shortDuration(growth.window), th.MaxGrowthPerMinute))
	}
	if *st.Messages > th.MaxMessages {
		reasons = append(reasons, retryv1alpha1.ReasonTooManyMessages)
		messages = append(messages, fmt.Sprintf("holds %d dead letters, more than maxMessages %d", *st.Messages, th.MaxMessages))
	}
	if o := st.OldestMessageTime; o != nil && *st.Messages > 0 && now.Sub(o.Time) > th.MaxOldestAge {
		reasons = append(reasons, retryv1alpha1.ReasonOldMessages)
		messages = append(messages, fmt.Sprintf("the oldest dead letter, from %s, is older than maxOldestAge %s",
			o.UTC().Format(time.RFC3339), shortDuration(th.MaxOldestAge)))
	}
	if len(reasons) == 0 {
		c.Status, c.Reason = metav1.ConditionTrue, retryv1alpha1.ReasonHealthy
		c.Message = fmt.Sprintf("no alert threshold crossed (maxMessages %d, maxGrowthPerMinute %d, maxOldestAge %s)",
			th.MaxMessages, th.MaxGrowthPerMinute, shortDuration(th.MaxOldestAge))
	} else {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, reasons[0], strings.Join(messages, "; ")
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// setDLQReady sets Ready: True with reason TopicReady when the reconcile met no problem, else False
// with the reason of the first problem and every problem's message.
func setDLQReady(st *retryv1alpha1.DeadLetterQueueStatus, generation int64, ps problems, readyMessage string) {
	meta.SetStatusCondition(&st.Conditions, ps.condition(retryv1alpha1.ConditionReady, generation, retryv1alpha1.ReasonTopicReady, readyMessage))
}

// dlqReadyMessage describes a ready topic.
func dlqReadyMessage(want kafka.TopicSpec, topic *kafka.TopicInfo) string {
	partitions := want.Partitions
	if topic != nil && topic.Exists {
		partitions = topic.Partitions
	}
	return fmt.Sprintf("topic %s has %d partitions as specified", want.Name, partitions)
}
