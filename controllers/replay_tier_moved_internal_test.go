package controllers

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// A long Replay found a pipeline's first tier when it started; a naming change made that tier
// unused since (it drains, then is deleted under Delete or no longer consumed under Retain). The
// run's next write there is refused before anything is written, so that the run stops and resumes
// from its checkpoint into the pipeline's current first tier; a write into that one, or into a
// source topic (spec.target.topic) whatever pipeline its records name, goes through. So does none
// into a tier of a pipeline deleted since.
func TestAReplayNeverWritesIntoATierNoLongerThePipelinesFirst(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const old, current, source = "team.orders.retry.1", "team.orders.retry.10s", "orders"
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders"}}
	p.Status.Topics = &retryv1alpha1.PipelineTopics{Source: source, Retries: []retryv1alpha1.RetryTopicStatus{{Name: current}}, UnusedRetries: []string{old}}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(p).WithStatusSubresource(p).Build()
	f := kafkafake.New()
	for _, n := range []string{old, current, source} {
		f.AddTopic(n, 1, 1, nil)
	}
	k := newKafkaAccessForTest(clocktesting.NewFakePassiveClock(time.Now()))
	factory := k.replayFactory(f, c)
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	replayed := func(pipeline string) []kafka.ProduceRecord {
		return []kafka.ProduceRecord{{Partition: 0, Value: []byte("v"), Headers: []kafka.Header{
			{Key: headers.Pipeline, Value: []byte(pipeline)}, {Key: headers.ReplayOf, Value: []byte("team.dlq/0/1")}, {Key: headers.ReplayCount, Value: []byte("1")}}}}
	}
	written := func(topic string) int64 { return f.Offsets(topic)[0].End }

	res, err := factory.ProduceRecords(ctx, conn, old, replayed("team/orders"))
	g.Expect(err).To(HaveOccurred(), "the tier the run found is no longer the pipeline's first")
	g.Expect(res).To(BeNil(), "nothing written: the run stops and resumes from its checkpoint")
	g.Expect(written(old)).To(BeZero())

	_, err = factory.ProduceRecords(ctx, conn, current, replayed("team/orders"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written(current)).To(Equal(int64(1)))
	_, err = factory.ProduceRecords(ctx, conn, source, replayed("team/orders"))
	g.Expect(err).NotTo(HaveOccurred(), "a source topic is no pipeline's tier")
	g.Expect(written(source)).To(Equal(int64(1)))

	g.Expect(c.Delete(ctx, p)).To(Succeed())
	_, err = factory.ProduceRecords(ctx, conn, current, replayed("team/orders"))
	g.Expect(err).To(HaveOccurred(), "the pipeline is gone, its tiers with it")
	g.Expect(written(current)).To(Equal(int64(1)))
}
