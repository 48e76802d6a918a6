package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkastats"
)

func offsets(startEnd ...[2]int64) []kafka.PartitionOffsets {
	out := make([]kafka.PartitionOffsets, len(startEnd))
	for i, se := range startEnd {
		out[i] = kafka.PartitionOffsets{Partition: int32(i), Start: se[0], End: se[1]}
	}
	return out
}

func TestTrimPlan(t *testing.T) {
	for name, tc := range map[string]struct {
		offsets []kafka.PartitionOffsets
		max     int64
		want    map[int32]int64
	}{
		"under the limit: nothing to delete": {
			offsets: offsets([2]int64{0, 3}, [2]int64{0, 3}), max: 10, want: nil,
		},
		"exactly at the limit: nothing to delete": {
			offsets: offsets([2]int64{5, 10}, [2]int64{0, 5}), max: 10, want: nil,
		},
		"excess spread in proportion, largest remainder gets the rounding": {
			// 30 held, 20 to delete: 15/30*20=10, 10/30*20=6.67, 5/30*20=3.33 -> 10, 7, 3.
			offsets: offsets([2]int64{0, 15}, [2]int64{0, 10}, [2]int64{0, 5}), max: 10,
			want: map[int32]int64{0: 10, 1: 7, 2: 3},
		},
		"start offsets are kept: the oldest records of each partition go": {
			offsets: offsets([2]int64{100, 120}, [2]int64{50, 70}), max: 20,
			want: map[int32]int64{0: 110, 1: 60},
		},
		"empty partitions are left alone": {
			offsets: offsets([2]int64{7, 7}, [2]int64{0, 4}), max: 1,
			want: map[int32]int64{1: 3},
		},
		"equal remainders go to the lowest partition first": {
			offsets: offsets([2]int64{0, 1}, [2]int64{0, 1}, [2]int64{0, 1}), max: 1,
			want: map[int32]int64{0: 1, 1: 1},
		},
		"a limit of zero empties the topic": {
			offsets: offsets([2]int64{0, 3}, [2]int64{2, 4}), max: 0,
			want: map[int32]int64{0: 3, 1: 4},
		},
		"huge offsets do not overflow": {
			offsets: offsets([2]int64{0, 1 << 61}, [2]int64{0, 1 << 61}), max: 2,
			want: map[int32]int64{0: 1<<61 - 1, 1: 1<<61 - 1},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := trimPlan(tc.offsets, tc.max)
			g.Expect(got).To(Equal(tc.want))
			if tc.want != nil {
				after := append([]kafka.PartitionOffsets(nil), tc.offsets...)
				for i := range after {
					if b, ok := got[after[i].Partition]; ok {
						after[i].Start = b
					}
				}
				g.Expect(kafkastats.CountMessages(after)).To(Equal(tc.max), "the topic holds exactly the limit afterwards")
			}
		})
	}
}

func TestSetDLQFigures(t *testing.T) {
	at := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	earlier := metav1.NewTime(at.Add(-time.Hour))
	topic := &kafka.TopicInfo{Name: "dlq", Exists: true, Partitions: 3}
	for name, tc := range map[string]struct {
		before      retryv1alpha1.DeadLetterQueueStatus
		topic       *kafka.TopicInfo
		offsets     []kafka.PartitionOffsets
		counted     bool
		wantPart    int32
		wantMsgs    *int64
		wantRefresh *metav1.Time
	}{
		"first count writes zero messages and the refresh time": {
			topic: topic, offsets: offsets([2]int64{0, 0}), counted: true,
			wantPart: 3, wantMsgs: ptr.To[int64](0), wantRefresh: ptr.To(metav1.NewTime(at)),
		},
		"unchanged figures keep the old refresh time, so nothing is written": {
			before: retryv1alpha1.DeadLetterQueueStatus{Partitions: 3, Messages: ptr.To[int64](5), LastRefreshTime: &earlier},
			topic:  topic, offsets: offsets([2]int64{0, 5}), counted: true,
			wantPart: 3, wantMsgs: ptr.To[int64](5), wantRefresh: &earlier,
		},
		"a new count moves the refresh time": {
			before: retryv1alpha1.DeadLetterQueueStatus{Partitions: 3, Messages: ptr.To[int64](5), LastRefreshTime: &earlier},
			topic:  topic, offsets: offsets([2]int64{2, 10}), counted: true,
			wantPart: 3, wantMsgs: ptr.To[int64](8), wantRefresh: ptr.To(metav1.NewTime(at)),
		},
		"figures not read this time are kept": {
			before:   retryv1alpha1.DeadLetterQueueStatus{Partitions: 3, Messages: ptr.To[int64](5), LastRefreshTime: &earlier},
			wantPart: 3, wantMsgs: ptr.To[int64](5), wantRefresh: &earlier,
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := tc.before
			setDLQFigures(&st, tc.topic, tc.offsets, tc.counted, at)
			g.Expect(st.Partitions).To(Equal(tc.wantPart))
			g.Expect(st.Messages).To(Equal(tc.wantMsgs))
			g.Expect(st.LastRefreshTime).To(Equal(tc.wantRefresh))
		})
	}
}

func TestSetDLQReady(t *testing.T) {
	for name, tc := range map[string]struct {
		problems    problems
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{
		"no problem: ready": {
			wantStatus: metav1.ConditionTrue, wantReason: retryv1alpha1.ReasonTopicReady, wantMessage: "topic q has 3 partitions as specified",
		},
		"the first problem gives the reason, every message is kept": {
			problems: problems{
				{Reason: retryv1alpha1.ReasonPartitionShrinkRefused, Message: "too many partitions"},
				{Reason: retryv1alpha1.ReasonKafkaRejected, Message: "INVALID_CONFIG"},
				{Reason: retryv1alpha1.ReasonKafkaRejected, Message: "INVALID_CONFIG"},
			},
			wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonPartitionShrinkRefused, wantMessage: "too many partitions; INVALID_CONFIG",
		},
		"unreachable": {
			problems:   problems{{Reason: retryv1alpha1.ReasonKafkaUnavailable, Message: "dial tcp 127.0.0.1:1: connection refused"}},
			wantStatus: metav1.ConditionFalse, wantReason: retryv1alpha1.ReasonKafkaUnavailable, wantMessage: "dial tcp 127.0.0.1:1: connection refused",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := &retryv1alpha1.DeadLetterQueueStatus{}
			setDLQReady(st, 7, tc.problems, "topic q has 3 partitions as specified")
			c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			g.Expect(c.Message).To(Equal(tc.wantMessage))
			g.Expect(c.ObservedGeneration).To(Equal(int64(7)))
		})
	}
}

func TestDLQTopicSpec(t *testing.T) {
	g := NewWithT(t)
	dlq := &retryv1alpha1.DeadLetterQueue{Spec: retryv1alpha1.DeadLetterQueueSpec{
		Topic:     retryv1alpha1.DeadLetterTopic{Name: "q", Partitions: 6, ReplicationFactor: ptr.To[int32](3), Config: map[string]string{"compression.type": "zstd"}},
		Retention: &retryv1alpha1.DeadLetterRetention{MaxAge: &metav1.Duration{Duration: 168 * time.Hour}, MaxMessages: ptr.To[int64](10)},
	}}
	g.Expect(dlqTopicSpec(dlq)).To(Equal(kafka.TopicSpec{Name: "q", Partitions: 6, ReplicationFactor: 3,
		Configs: map[string]string{"compression.type": "zstd", "retention.ms": "604800000"}}))
	g.Expect(dlqTopicSpec(&retryv1alpha1.DeadLetterQueue{Spec: retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: "q"}}})).
		To(Equal(kafka.TopicSpec{Name: "q", Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{}}))
}
