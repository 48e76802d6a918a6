package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/internal/kafkastats"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
)

// independentDueCount counts, from the records of topic, those the group has not consumed whose
// retryops.due header is not after now: what the dispatcher would deliver now.
func independentDueCount(f *kafkafake.Fake, topic string, committed map[int32]int64, now time.Time) int64 {
	var n int64
	for p, po := range f.Offsets(topic) {
		for _, r := range f.Records(topic, int32(p)) {
			if r.Offset < max(po.Start, committed[int32(p)]) {
				continue
			}
			for _, h := range r.Headers {
				if due, err := headers.ParseTime(string(h.Value)); h.Key == headers.Due && err == nil && !due.After(now) {
					n++
				}
			}
		}
	}
	return n
}

// Records waiting in a 10-minute tier are lag to a plain lag scaler but not due; they count once
// their due time passes (the injected clock stepped), equal to a count from their due headers.
func TestPipelineDueLagCountsOnlyTheRecordsDue(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	f := kafkafake.New()
	const source, tier, group = "orders", "orders.retry.1", "team.orders"
	f.AddTopic(source, 2, 1, nil)
	f.AddTopic(tier, 2, 1, nil)
	f.Produce(source, 0, 3)
	f.Commit(group, source, 0, 1) // 2 source records left to consume
	const delay = 10 * time.Minute
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	// Five records go to the tier a minute apart, on both partitions; the group consumed the first.
	for i := range 5 {
		at := start.Add(time.Duration(i) * time.Minute)
		_, err := f.ProduceRecords(ctx, conn, tier, []kafka.ProduceRecord{{Partition: int32(i % 2), Timestamp: at,
			Headers: []kafka.Header{{Key: headers.Due, Value: []byte(headers.FormatTime(at.Add(delay)))}}}})
		g.Expect(err).NotTo(HaveOccurred())
	}
	f.Commit(group, tier, 0, 1)
	committed := map[int32]int64{0: 1}

	r := &ConsumerPipelineReconciler{}
	r.Client = fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build()
	r.RefreshInterval = time.Second
	r.Kafka = &kafkaAccess{Offsets: kafkastats.NewOffsets(clk), Commits: kafkastats.NewCommits(clk), Due: kafkastats.NewDueOffsets(clk)}
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{Source: retryv1alpha1.PipelineSource{Topic: source}, DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "dlq"}}}
	figures := func() (due, plain int64) {
		refs := pipelineRefs{tiers: dispatchercfg.Tiers{{Name: tier, Delay: sdkpolicy.D(delay), Earliest: sdkpolicy.D(delay), Latest: sdkpolicy.D(delay)}}}
		topics := pipelineTopics{retries: []retryv1alpha1.RetryTopicStatus{{Name: tier, Delay: metav1.Duration{Duration: delay}}}}
		live := r.figures(ctx, p, refs, topics, &kafkaClient{admin: f, connKey: "conn"})
		g.Expect(live.dueLag).NotTo(BeNil())
		return *live.dueLag, *live.consumerLag + live.tierBacklog[tier]
	}

	due, plain := figures()
	g.Expect(plain).To(Equal(int64(2+4)), "KEDA-style lag: the source's and every tier record")
	g.Expect(due).To(Equal(int64(2)), "none of the tier's records is due: the source's only")
	g.Expect(independentDueCount(f, tier, committed, clk.Now())).To(BeZero())

	// 11 minutes on: the records written at 0 and 1 minute are due (the one at 0 was consumed).
	clk.SetTime(start.Add(11*time.Minute + time.Second))
	due, _ = figures()
	g.Expect(due).To(Equal(int64(2 + 1)))
	g.Expect(due - 2).To(Equal(independentDueCount(f, tier, committed, clk.Now())))

	// Exactly at the due time of the record written at 3 minutes, it counts.
	clk.SetTime(start.Add(13 * time.Minute))
	due, _ = figures()
	g.Expect(due - 2).To(Equal(independentDueCount(f, tier, committed, clk.Now())))
	g.Expect(due).To(Equal(int64(2 + 3)))

	// All due.
	clk.SetTime(start.Add(time.Hour))
	due, plain = figures()
	g.Expect(due).To(Equal(plain))
	g.Expect(due - 2).To(Equal(independentDueCount(f, tier, committed, clk.Now())))
}

func TestSetPipelineFiguresDueLag(t *testing.T) {
	g := NewWithT(t)
	st := &retryv1alpha1.ConsumerPipelineStatus{DueLag: ptr.To[int64](9)}
	setPipelineFigures(st, nil, pipelineLive{lagRead: true, consumerLag: ptr.To[int64](1), dueLag: ptr.To[int64](3)})
	g.Expect(st.DueLag).To(Equal(ptr.To[int64](3)))
	setPipelineFigures(st, nil, pipelineLive{lagRead: true, consumerLag: ptr.To[int64](1)})
	g.Expect(st.DueLag).To(Equal(ptr.To[int64](3)), "the due offsets not read: left as it was")
	setPipelineFigures(st, nil, pipelineLive{lagRead: true})
	g.Expect(st.DueLag).To(BeNil(), "no source topic: no figure")
	st.DueLag = ptr.To[int64](3)
	setPipelineFigures(st, nil, pipelineLive{withheld: true})
	g.Expect(st.DueLag).To(BeNil())
}
