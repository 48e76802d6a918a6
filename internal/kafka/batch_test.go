package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// gated holds every CreateTopics until the test opens the gate once per batch.
type gated struct {
	*kafkafake.Fake
	gate chan struct{}
}

func (g *gated) CreateTopics(ctx context.Context, topics []kafka.TopicCreate) map[string]error {
	<-g.gate
	return g.Fake.CreateTopics(ctx, topics)
}

func newClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
}

// createdIn are the names of each batch of creates the fake received.
func createdIn(f *kafkafake.Fake) [][]string {
	var out [][]string
	for _, c := range f.CallsTo(kafkafake.CreateTopics) {
		var names []string
		for _, t := range c.Args[0].([]kafka.TopicCreate) {
			names = append(names, t.Name)
		}
		out = append(out, names)
	}
	return out
}

// TestCallsArrivingDuringARequestGoAsSoonAsItReturns: the calls that arrive while a batch is in
// flight wait for it, not for another window, and then go together.
func TestCallsArrivingDuringARequestGoAsSoonAsItReturns(t *testing.T) {
	g := gomega.NewWithT(t)
	f := &gated{Fake: kafkafake.New(), gate: make(chan struct{})}
	clk := newClock()
	b := kafka.NewBatching(f, kafka.BatchOptions{Window: time.Second, Clock: clk})
	ctx := context.Background()
	var wg sync.WaitGroup
	create := func(name string) {
		wg.Go(func() { g.Expect(b.CreateTopic(ctx, name, 1, 1, nil)).To(gomega.Succeed()) })
	}
	create("first")
	g.Eventually(b.Queued).Should(gomega.Equal(1))
	clk.Step(time.Second)
	g.Eventually(b.Queued).Should(gomega.Equal(0)) // taken: in flight, held by the gate
	create("second")
	create("third")
	g.Eventually(b.Queued).Should(gomega.Equal(2))
	f.gate <- struct{}{}
	f.gate <- struct{}{} // the second batch, with no step of the clock
	wg.Wait()
	got := createdIn(f.Fake)
	g.Expect(got).To(gomega.HaveLen(2))
	g.Expect(got[0]).To(gomega.Equal([]string{"first"}))
	g.Expect(got[1]).To(gomega.ConsistOf("second", "third"))
}

// TestATopicChangedTwiceWaitsForTheNextBatch: Kafka refuses a topic twice in one request, so the
// second create of a name goes in the next batch and fails as it would after the first.
func TestATopicChangedTwiceWaitsForTheNextBatch(t *testing.T) {
	g := gomega.NewWithT(t)
	f := kafkafake.New()
	b := kafka.NewBatching(f, kafka.BatchOptions{MaxCalls: 3, Clock: newClock()})
	errs := make(chan error, 3)
	for _, n := range []string{"x", "x", "y"} {
		go func() { errs <- b.CreateTopic(context.Background(), n, 1, 1, nil) }()
	}
	var exists, ok int
	for range 3 {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, kafka.ErrTopicExists):
			exists++
		default:
			t.Errorf("unexpected %v", err)
		}
	}
	g.Expect([]int{ok, exists}).To(gomega.Equal([]int{2, 1}))
	got := createdIn(f)
	g.Expect(got).To(gomega.HaveLen(2))
	g.Expect(got[0]).To(gomega.ConsistOf("x", "y"))
	g.Expect(got[1]).To(gomega.Equal([]string{"x"}))
}

// TestReadsOfOneTopicInABatchAreAskedOnce: callers describing the same topic share one read and
// each gets its own copy of the configs.
func TestReadsOfOneTopicInABatchAreAskedOnce(t *testing.T) {
	g := gomega.NewWithT(t)
	f := kafkafake.New()
	f.AddTopic("shared", 2, 1, map[string]string{"retention.ms": "1"})
	b := kafka.NewBatching(f, kafka.BatchOptions{MaxCalls: 3, Clock: newClock()})
	got := make([]map[string]kafka.TopicInfo, 3)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			var err error
			got[i], err = b.DescribeTopics(context.Background(), "shared", "shared")
			g.Expect(err).NotTo(gomega.HaveOccurred())
		})
	}
	wg.Wait()
	calls := f.CallsTo(kafkafake.DescribeTopicsEach)
	g.Expect(calls).To(gomega.HaveLen(1))
	g.Expect(calls[0].Args[0]).To(gomega.HaveLen(3)) // the fake is asked per caller; franz asks each name once
	got[0]["shared"].Configs["retention.ms"] = "changed"
	g.Expect(got[1]["shared"]).To(gomega.Equal(f.Topic("shared")))
}

// plainFactory is a factory whose admins cannot batch.
type plainFactory struct {
	kafka.ClientFactory
	admin kafka.Admin
}

func (p plainFactory) Admin(context.Context, kafka.Connection) (kafka.Admin, error) {
	return p.admin, nil
}

// TestTheBatchingFactoryGivesOneBatcherPerConnection: every resource on one connection key shares
// one batching admin, a forgotten key gets a new one, and an admin that cannot batch is handed out
// as it is.
func TestTheBatchingFactoryGivesOneBatcherPerConnection(t *testing.T) {
	g := gomega.NewWithT(t)
	fake := kafkafake.New()
	f := kafka.NewBatchingFactory(fake, kafka.BatchOptions{})
	ctx := context.Background()
	one := kafka.Connection{BootstrapServers: []string{"k:9092"}}
	other := kafka.Connection{BootstrapServers: []string{"l:9092"}}
	a1, err := f.Admin(ctx, one)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	a2, _ := f.Admin(ctx, one)
	b1, _ := f.Admin(ctx, other)
	g.Expect(a1).To(gomega.BeAssignableToTypeOf(&kafka.Batching{}))
	g.Expect(a1).To(gomega.BeIdenticalTo(a2))
	g.Expect(a1).NotTo(gomega.BeIdenticalTo(b1))
	f.Forget(one.Key())
	a3, _ := f.Admin(ctx, one)
	g.Expect(a3).NotTo(gomega.BeIdenticalTo(a1))

	plain := plainFactory{ClientFactory: fake, admin: struct{ kafka.Admin }{fake}}
	p, _ := kafka.NewBatchingFactory(plain, kafka.BatchOptions{}).Admin(ctx, one)
	g.Expect(p).To(gomega.BeIdenticalTo(plain.admin))
}
