package controllers

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func TestDeadLetterCount(t *testing.T) {
	full := make([]retryv1alpha1.NamedCount, maxBreakdownEntries)
	for i := range full {
		full[i] = retryv1alpha1.NamedCount{Name: "ns/p" + string(rune('a'+i)), Count: int64(100 - i)}
	}
	noComplete := func(string) (int64, bool) { return 0, false }
	complete := func(id string) (int64, bool) {
		if id == "ns/below" {
			return 3, true
		}
		return 0, true
	}
	for name, tc := range map[string]struct {
		st        retryv1alpha1.DeadLetterQueueStatus
		id        string
		complete  func(string) (int64, bool)
		want      *int64
		wantKnown bool
	}{
		"a queue never counted: unknown (nil)": {
			st: retryv1alpha1.DeadLetterQueueStatus{}, id: "ns/a", complete: noComplete, want: nil, wantKnown: true,
		},
		"listed: the queue's own figure": {
			st: retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](5), Pipelines: []retryv1alpha1.NamedCount{{Name: "ns/a", Count: 3}, {Name: "ns/b", Count: 2}}},
			id: "ns/b", complete: noComplete, want: ptr.To[int64](2), wantKnown: true,
		},
		"absent from a complete list: zero": {
			st: retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](3), Pipelines: []retryv1alpha1.NamedCount{{Name: "ns/a", Count: 3}}},
			id: "ns/b", complete: noComplete, want: ptr.To[int64](0), wantKnown: true,
		},
		"absent from a full list: the complete counts answer": {
			st: retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](2000), Pipelines: full},
			id: "ns/below", complete: complete, want: ptr.To[int64](3), wantKnown: true,
		},
		"absent from a full list, complete counts not known yet: left as it was": {
			st: retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](2000), Pipelines: full},
			id: "ns/below", complete: noComplete, want: nil, wantKnown: false,
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, known := deadLetterCount(tc.st, tc.id, tc.complete)
			g.Expect(known).To(Equal(tc.wantKnown))
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestSetPipelineFigures(t *testing.T) {
	tiers := func(backlogs ...int64) *retryv1alpha1.PipelineTopics {
		pt := &retryv1alpha1.PipelineTopics{Source: "src"}
		for i, b := range backlogs {
			pt.Retries = append(pt.Retries, retryv1alpha1.RetryTopicStatus{Name: "src.retry." + string(rune('1'+i)), Delay: metav1.Duration{Duration: time.Second}, Backlog: b})
		}
		return pt
	}
	previous := retryv1alpha1.ConsumerPipelineStatus{
		Topics: tiers(4, 5), ConsumerLag: ptr.To[int64](7), RetryBacklog: ptr.To[int64](9), DeadLetterMessages: ptr.To[int64](2),
		ReadyReplicas: ptr.To[int32](1),
	}
	for name, tc := range map[string]struct {
		live pipelineLive
		want retryv1alpha1.ConsumerPipelineStatus
	}{
		"read: every figure is written, the tiers' backlogs summed": {
			live: pipelineLive{
				lagRead: true, consumerLag: ptr.To[int64](0), tierBacklog: map[string]int64{"src.retry.1": 1, "src.retry.2": 0},
				deadLettersRead: true, deadLetterMessages: ptr.To[int64](6),
			},
			want: retryv1alpha1.ConsumerPipelineStatus{
				Topics: tiers(1, 0), ConsumerLag: ptr.To[int64](0), RetryBacklog: ptr.To[int64](1), DeadLetterMessages: ptr.To[int64](6),
				ReadyReplicas: ptr.To[int32](1),
			},
		},
		"draining tiers (left by a policy change): their records count in the backlog": {
			live: pipelineLive{
				lagRead: true, consumerLag: ptr.To[int64](0), tierBacklog: map[string]int64{"src.retry.1": 1, "src.retry.2": 0},
				drainingBacklog: map[string]int64{"old.retry.1": 30, "old.retry.2": 2},
			},
			want: retryv1alpha1.ConsumerPipelineStatus{
				Topics: tiers(1, 0), ConsumerLag: ptr.To[int64](0), RetryBacklog: ptr.To[int64](33), DeadLetterMessages: ptr.To[int64](2),
				ReadyReplicas: ptr.To[int32](1),
			},
		},
		"nothing read: the previous figures stay, tiers included": {
			live: pipelineLive{},
			want: previous,
		},
		"a missing source: no lag figure": {
			live: pipelineLive{lagRead: true, tierBacklog: map[string]int64{"src.retry.1": 4, "src.retry.2": 5}},
			want: retryv1alpha1.ConsumerPipelineStatus{
				Topics: tiers(4, 5), ConsumerLag: nil, RetryBacklog: ptr.To[int64](9), DeadLetterMessages: ptr.To[int64](2),
				ReadyReplicas: ptr.To[int32](1),
			},
		},
		"the queue is gone: no dead letter figure": {
			live: pipelineLive{deadLettersRead: true},
			want: retryv1alpha1.ConsumerPipelineStatus{
				Topics: tiers(4, 5), ConsumerLag: ptr.To[int64](7), RetryBacklog: ptr.To[int64](9), ReadyReplicas: ptr.To[int32](1),
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := *previous.DeepCopy()
			// setPipelineTopics rebuilds the tiers without their backlog before this runs.
			st.Topics = tiers(0, 0)
			setPipelineFigures(&st, previous.Topics, tc.live)
			g.Expect(st).To(Equal(tc.want))
			g.Expect(st.Circuit).To(BeEmpty(), "the circuit state is not reported yet")
		})
	}
}

func TestChangedPipelineCounts(t *testing.T) {
	counted := func(pipelines ...retryv1alpha1.NamedCount) retryv1alpha1.DeadLetterQueueStatus {
		return retryv1alpha1.DeadLetterQueueStatus{Messages: ptr.To[int64](1), Pipelines: pipelines}
	}
	full := make([]retryv1alpha1.NamedCount, maxBreakdownEntries)
	for i := range full {
		full[i] = retryv1alpha1.NamedCount{Name: "ns/p" + string(rune('a'+i)), Count: 1}
	}
	fuller := append([]retryv1alpha1.NamedCount{{Name: "ns/new", Count: 9}}, full[:maxBreakdownEntries-1]...)
	for name, tc := range map[string]struct {
		before, after retryv1alpha1.DeadLetterQueueStatus
		wantChanged   map[string]bool
		wantAll       bool
	}{
		"no change":                       {before: counted(retryv1alpha1.NamedCount{Name: "ns/a", Count: 1}), after: counted(retryv1alpha1.NamedCount{Name: "ns/a", Count: 1}), wantChanged: map[string]bool{}},
		"one count changed: only that":    {before: counted(retryv1alpha1.NamedCount{Name: "ns/a", Count: 1}, retryv1alpha1.NamedCount{Name: "ns/b", Count: 1}), after: counted(retryv1alpha1.NamedCount{Name: "ns/a", Count: 2}, retryv1alpha1.NamedCount{Name: "ns/b", Count: 1}), wantChanged: map[string]bool{"ns/a": true}},
		"one appears, one goes":           {before: counted(retryv1alpha1.NamedCount{Name: "ns/a", Count: 1}), after: counted(retryv1alpha1.NamedCount{Name: "ns/b", Count: 1}), wantChanged: map[string]bool{"ns/a": true, "ns/b": true}},
		"counted for the first time: all": {before: retryv1alpha1.DeadLetterQueueStatus{}, after: counted(), wantAll: true},
		"a full list that changed: all":   {before: counted(full...), after: counted(fuller...), wantAll: true},
		"a full list unchanged: none":     {before: counted(full...), after: counted(full...)},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			changed, all := changedPipelineCounts(tc.before, tc.after)
			g.Expect(all).To(Equal(tc.wantAll))
			if !tc.wantAll && tc.wantChanged != nil {
				g.Expect(changed).To(Equal(tc.wantChanged))
			}
			if !tc.wantAll && tc.wantChanged == nil {
				g.Expect(changed).To(BeEmpty())
			}
		})
	}
}
