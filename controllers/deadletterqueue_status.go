package controllers

import (
	"fmt"
	"math/bits"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// dlqStatus rebuilds a queue's status from what the reconcile saw. Figures it could not read this
// time (Kafka unreachable, a conflict) keep their previous values rather than dropping to zero, and
// fields owned by later work (the breakdown by reason, message times) are carried over untouched.
func dlqStatus(s *dlqScope) v1.DeadLetterQueueStatus {
	dlq := s.dlq
	st := *dlq.Status.DeepCopy()
	st.ObservedGeneration = dlq.Generation
	st.Topic = s.want.Name
	setDLQFigures(&st, s.topic, s.offsets, s.counted, s.offsetsAt)
	setDLQReady(&st, dlq.Generation, s.problems, dlqReadyMessage(s.want, s.topic))
	return st
}

// setDLQFigures writes the partition count and the number of messages held. lastRefreshTime moves
// only when a figure changed, so that a resync that finds nothing new writes nothing: it is the time
// of the read that produced the figures shown.
func setDLQFigures(st *v1.DeadLetterQueueStatus, topic *kafka.TopicInfo, offsets []kafka.PartitionOffsets, counted bool, at time.Time) {
	changed := false
	if topic != nil && topic.Exists && topic.Partitions != st.Partitions {
		st.Partitions, changed = topic.Partitions, true
	}
	if counted {
		if n := countMessages(offsets); st.Messages == nil || n != *st.Messages {
			st.Messages, changed = &n, true
		}
	}
	if changed && counted {
		t := metav1.NewTime(at)
		st.LastRefreshTime = &t
	}
}

// setDLQReady sets Ready: True with reason TopicReady when the reconcile met no problem, else False
// with the reason of the first problem and every problem's message.
func setDLQReady(st *v1.DeadLetterQueueStatus, generation int64, ps problems, readyMessage string) {
	meta.SetStatusCondition(&st.Conditions, ps.condition(v1.ConditionReady, generation, v1.ReasonTopicReady, readyMessage))
}

// dlqReadyMessage describes a ready topic.
func dlqReadyMessage(want topicSpec, topic *kafka.TopicInfo) string {
	partitions := want.Partitions
	if topic != nil && topic.Exists {
		partitions = topic.Partitions
	}
	return fmt.Sprintf("topic %s has %d partitions as specified", want.Name, partitions)
}

// countMessages is the number of records held: end minus start, summed over partitions.
func countMessages(offsets []kafka.PartitionOffsets) int64 {
	var n int64
	for _, o := range offsets {
		if o.End > o.Start && o.Start >= 0 {
			n += o.End - o.Start
		}
	}
	return n
}

// trimPlan returns, per partition, the offset before which records must be deleted so that the topic
// holds maxMessages records, or nil when it holds no more than that.
//
// Record timestamps are not read (that would mean fetching every partition's head), so the age order
// across partitions is unknown. The excess is spread over the partitions in proportion to what each
// holds, by the largest-remainder method so the total is exact: with keys spread evenly by the
// partitioner, records at the same relative position of each partition are about the same age, and
// this deletes about the oldest ones. Within a partition the deletion is always of the oldest.
func trimPlan(offsets []kafka.PartitionOffsets, maxMessages int64) map[int32]int64 {
	total := countMessages(offsets)
	excess := total - maxMessages
	if maxMessages < 0 || excess <= 0 {
		return nil
	}
	type share struct {
		i         int
		held, cut int64
		rem       int64 // remainder of the proportional share, scaled by total
	}
	shares := make([]share, 0, len(offsets))
	var assigned int64
	for i := range offsets {
		held := countMessages(offsets[i : i+1])
		if held == 0 {
			continue
		}
		// excess*held/total in 128 bits: excess < total, so the quotient fits.
		hi, lo := bits.Mul64(uint64(excess), uint64(held))
		cut, rem := bits.Div64(hi, lo, uint64(total))
		shares = append(shares, share{i: i, held: held, cut: int64(cut), rem: int64(rem)})
		assigned += int64(cut)
	}
	// Hand out what rounding down left, largest remainder first, then lowest partition.
	sort.SliceStable(shares, func(a, b int) bool {
		if shares[a].rem != shares[b].rem {
			return shares[a].rem > shares[b].rem
		}
		return offsets[shares[a].i].Partition < offsets[shares[b].i].Partition
	})
	for k := 0; assigned < excess; k = (k + 1) % len(shares) {
		if shares[k].cut < shares[k].held {
			shares[k].cut++
			assigned++
		}
	}
	out := make(map[int32]int64, len(shares))
	for _, sh := range shares {
		if sh.cut > 0 {
			o := offsets[sh.i]
			out[o.Partition] = o.Start + sh.cut
		}
	}
	return out
}
