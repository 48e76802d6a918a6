package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

func TestPlanTopic(t *testing.T) {
	want := topicSpec{Name: "t", Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{"compression.type": "zstd", "retention.ms": "3600000"}}
	exists := func(partitions int32, configs map[string]string) kafka.TopicInfo {
		return kafka.TopicInfo{Name: "t", Exists: true, Partitions: partitions, Configs: configs}
	}
	for name, tc := range map[string]struct {
		have kafka.TopicInfo
		want topicPlan
		text string
	}{
		"missing topic is created": {
			have: kafka.TopicInfo{Name: "t"}, want: topicPlan{Create: true}, text: "created with 3 partitions",
		},
		"as specified: nothing to do, other configs left alone": {
			have: exists(3, map[string]string{"compression.type": "zstd", "retention.ms": "3600000", "cleanup.policy": "delete"}),
			want: topicPlan{},
		},
		"config drift is set back": {
			have: exists(3, map[string]string{"compression.type": "gzip"}),
			want: topicPlan{SetConfigs: map[string]string{"compression.type": "zstd", "retention.ms": "3600000"}},
			text: "config set back: compression.type=zstd (was gzip), retention.ms=3600000 (was unset)",
		},
		"fewer partitions are grown": {
			have: exists(1, want.Configs), want: topicPlan{GrowTo: 3}, text: "grown from 1 to 3 partitions",
		},
		"more partitions are reported, never shrunk": {
			have: exists(5, want.Configs), want: topicPlan{ShrinkFrom: 5},
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := planTopic(want, tc.have)
			g.Expect(got).To(Equal(tc.want))
			g.Expect(got.describe(want, tc.have)).To(Equal(tc.text))
			g.Expect(got.empty()).To(Equal(tc.text == ""))
		})
	}
}

func TestApplyTopicPlan(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := kafkafake.New()
	want := topicSpec{Name: "t", Partitions: 3, ReplicationFactor: -1, Configs: map[string]string{"compression.type": "zstd"}}

	now, err := applyTopicPlan(ctx, f, want, kafka.TopicInfo{Name: "t"}, topicPlan{Create: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now.Partitions).To(Equal(int32(3)))
	g.Expect(f.Topic("t").Configs).To(HaveKeyWithValue("compression.type", "zstd"))

	g.Expect(f.AlterTopicConfigs(ctx, "t", map[string]string{"compression.type": "gzip"})).To(Succeed())
	want.Partitions = 5
	have := f.Topic("t")
	plan := planTopic(want, have)
	now, err = applyTopicPlan(ctx, f, want, have, plan)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(now.Partitions).To(Equal(int32(5)))
	g.Expect(f.Topic("t").Partitions).To(Equal(int32(5)))
	g.Expect(f.Topic("t").Configs).To(HaveKeyWithValue("compression.type", "zstd"))
	g.Expect(now.Configs).To(HaveKeyWithValue("compression.type", "zstd"))

	_, err = applyTopicPlan(ctx, f, want, kafka.TopicInfo{Name: "t"}, topicPlan{Create: true})
	g.Expect(errors.Is(err, kafka.ErrTopicExists)).To(BeTrue())
}

func TestClaimWinner(t *testing.T) {
	t0 := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	c := func(ns, name, uid string, created time.Time) claimant {
		return claimant{Kind: "DeadLetterQueue", Namespace: ns, Name: name, UID: types.UID(uid), Created: created}
	}
	for name, tc := range map[string]struct {
		claimants []claimant
		want      string
	}{
		"the only claimant wins":                        {[]claimant{c("a", "q", "1", t0)}, "a/q"},
		"the oldest wins":                               {[]claimant{c("a", "new", "1", t0.Add(time.Second)), c("b", "old", "2", t0)}, "b/old"},
		"same second: namespace, then name, decide":     {[]claimant{c("b", "a", "1", t0), c("a", "z", "2", t0), c("a", "y", "3", t0)}, "a/y"},
		"same second, same name elsewhere: UID decides": {[]claimant{c("a", "q", "2", t0), c("a", "q", "1", t0)}, "a/q#1"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			w, ok := claimWinner(tc.claimants)
			g.Expect(ok).To(BeTrue())
			got := w.Namespace + "/" + w.Name
			if tc.want == "a/q#1" {
				got += "#" + string(w.UID)
			}
			g.Expect(got).To(Equal(tc.want))
		})
	}
	_, ok := claimWinner(nil)
	NewWithT(t).Expect(ok).To(BeFalse())
}

func TestClaimKeyIgnoresServerOrderAndCase(t *testing.T) {
	g := NewWithT(t)
	g.Expect(claimKey([]string{"B:9092", " a:9092"}, "t")).To(Equal(claimKey([]string{"a:9092", "b:9092", "a:9092"}, "t")))
	g.Expect(claimKey([]string{"a:9092"}, "t")).NotTo(Equal(claimKey([]string{"a:9092"}, "u")))
}

func TestProblems(t *testing.T) {
	g := NewWithT(t)
	var ps problems
	ps.add(nil)
	g.Expect(ps).To(BeEmpty())
	g.Expect(ps.transient()).To(BeNil())
	g.Expect(ps.userOnly()).To(BeFalse())
	c := ps.condition(v1.ConditionReady, 3, "Fine", "all good")
	g.Expect(c).To(Equal(metav1.Condition{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Fine", Message: "all good", ObservedGeneration: 3}))

	ps.add(&problem{Reason: v1.ReasonInvalidSpec, Message: "bad", Kind: problemUser})
	g.Expect(ps.userOnly()).To(BeTrue())
	boom := errors.New("boom")
	ps.add(&problem{Reason: v1.ReasonKafkaUnavailable, Message: "down", Kind: problemTransient, Err: boom})
	g.Expect(ps.userOnly()).To(BeFalse())
	g.Expect(ps.transient()).To(MatchError(boom))
	c = ps.condition(v1.ConditionReady, 3, "Fine", "all good")
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(v1.ReasonInvalidSpec))
	g.Expect(c.Message).To(Equal("bad; down"))
}

func TestDeletionAttemptContext(t *testing.T) {
	now := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(now)
	deleting := []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1.ReasonDeleting, Message: "deleting topic: refused"}}
	ctx := context.Background()
	g := NewWithT(t)

	// Before the deadline: an attempt bounded by it.
	c, cancel := deletionAttemptContext(ctx, clk, now.Add(3*time.Second), deleting)
	d, ok := c.Deadline()
	g.Expect(ok).To(BeTrue())
	g.Expect(d).To(Equal(now.Add(3 * time.Second)))
	cancel()

	// Past it, after a failed attempt: no new attempt, the last error goes into the event.
	c, cancel = deletionAttemptContext(ctx, clk, now.Add(-time.Second), deleting)
	g.Expect(c).To(BeNil())
	cancel()
	g.Expect(lastDeletionError(deleting)).To(Equal("deleting topic: refused"))

	// Past it without any attempt (the operator was down): one attempt.
	c, cancel = deletionAttemptContext(ctx, clk, now.Add(-time.Second), nil)
	g.Expect(c).NotTo(BeNil())
	_, ok = c.Deadline()
	g.Expect(ok).To(BeFalse(), "bounded by the Kafka request timeout only")
	cancel()
	g.Expect(lastDeletionError(nil)).To(Equal("the deletion bound passed"))
}
