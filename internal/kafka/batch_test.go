package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// Batching over the fake under strain: callers who give up, a factory that forgets the
// connection, thousands of callers, a clock that never moves.

// held holds every batched alter and create in the inner admin until the test releases it, and says
// when one has started.
type held struct {
	*kafkafake.Fake
	started chan struct{}
	release chan struct{}
}

func newHeld() *held {
	return &held{Fake: kafkafake.New(), started: make(chan struct{}, 100), release: make(chan struct{})}
}

func (h *held) AlterTopicsConfigs(ctx context.Context, set map[string]map[string]string) map[string]error {
	h.started <- struct{}{}
	<-h.release
	return h.Fake.AlterTopicsConfigs(ctx, set)
}

func (h *held) CreateTopics(ctx context.Context, topics []kafka.TopicCreate) map[string]error {
	h.started <- struct{}{}
	<-h.release
	return h.Fake.CreateTopics(ctx, topics)
}

// TestACallerWhoGaveUpKeepsItsConfigs: a caller whose context ends while its alter or create
// is in flight returns at once and may reuse its configs map; the request in flight still sends
// what it asked, not what the map holds afterwards.
func TestACallerWhoGaveUpKeepsItsConfigs(t *testing.T) {
	g := gomega.NewWithT(t)
	h := newHeld()
	h.AddTopic("altered", 1, 1, nil)
	b := kafka.NewBatching(h, kafka.BatchOptions{MaxCalls: 1, Clock: newClock()})
	for _, call := range []func(context.Context, map[string]string) error{
		func(ctx context.Context, set map[string]string) error {
			return b.AlterTopicConfigs(ctx, "altered", set)
		},
		func(ctx context.Context, set map[string]string) error {
			return b.CreateTopic(ctx, "created", 1, 1, set)
		},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		set := map[string]string{"retention.ms": "1000"}
		errs := make(chan error, 1)
		go func() { errs <- call(ctx, set) }()
		<-h.started
		cancel()
		g.Expect(<-errs).To(gomega.MatchError(context.Canceled))
		set["retention.ms"] = "reused by the caller"
		h.release <- struct{}{}
	}
	g.Eventually(func() []string {
		return []string{h.Topic("altered").Configs["retention.ms"], h.Topic("created").Configs["retention.ms"]}
	}).Should(gomega.Equal([]string{"1000", "1000"}))
}

// goroutinesBack waits until the goroutines started since before have ended.
func goroutinesBack(g *gomega.WithT, before int) {
	g.Eventually(runtime.NumGoroutine).Should(gomega.BeNumerically("<=", before))
}

// TestCallersWhoGiveUpLeaveNothingBehind: callers whose contexts end while queued (the window
// not over) or in flight return with their context's error; the queued ones are never sent, the
// batch in flight still answers the caller who stayed, and no goroutine is left.
func TestCallersWhoGiveUpLeaveNothingBehind(t *testing.T) {
	g := gomega.NewWithT(t)
	before := runtime.NumGoroutine()
	h := newHeld()
	clk := newClock()
	b := kafka.NewBatching(h, kafka.BatchOptions{Window: time.Second, Clock: clk})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			err := b.CreateTopic(ctx, fmt.Sprintf("quitter-%d", i), 1, 1, nil)
			g.Expect(err).To(gomega.MatchError(context.Canceled))
		})
	}
	g.Eventually(b.Queued).Should(gomega.Equal(20))
	cancel()
	wg.Wait()
	stayed := make(chan error, 1)
	go func() { stayed <- b.CreateTopic(context.Background(), "stayed", 1, 1, nil) }()
	g.Eventually(b.Queued).Should(gomega.Equal(21))
	clk.Step(time.Second)
	<-h.started
	h.release <- struct{}{}
	g.Expect(<-stayed).To(gomega.Succeed())
	g.Expect(createdIn(h.Fake)).To(gomega.Equal([][]string{{"stayed"}}), "a create whose caller gave up while queued was sent")
	g.Expect(b.Queued()).To(gomega.BeZero())

	// In flight: the quitter returns before the request does; the request goes on for both.
	quitter, quit := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- b.CreateTopic(quitter, "in-flight-quitter", 1, 1, nil) }()
	go func() { stayed <- b.CreateTopic(context.Background(), "in-flight-stayer", 1, 1, nil) }()
	g.Eventually(b.Queued).Should(gomega.Equal(2))
	clk.Step(time.Second)
	<-h.started
	quit()
	g.Expect(<-gaveUp).To(gomega.MatchError(context.Canceled))
	h.release <- struct{}{}
	g.Expect(<-stayed).To(gomega.Succeed())
	g.Expect(h.Topic("in-flight-quitter").Exists).To(gomega.BeTrue())
	// The next caller of the quitter's topic learns it exists, as it would after an unbatched create.
	go func() { stayed <- b.CreateTopic(context.Background(), "in-flight-quitter", 1, 1, nil) }()
	// Queued at once, or taken by the request returning: step until the request starts.
	g.Eventually(func() bool {
		clk.Step(time.Second)
		select {
		case <-h.started:
			return true
		default:
			return false
		}
	}).Should(gomega.BeTrue())
	h.release <- struct{}{}
	g.Expect(errors.Is(<-stayed, kafka.ErrTopicExists)).To(gomega.BeTrue())
	goroutinesBack(g, before)
}

// TestAClockThatNeverMovesDoesNotHoldACallerPastItsContext: with a fake clock nobody steps the
// window never ends; a caller still returns at its context's deadline (the manager runs the real
// clock), and MaxCalls still sends without the clock.
func TestAClockThatNeverMovesDoesNotHoldACallerPastItsContext(t *testing.T) {
	g := gomega.NewWithT(t)
	f := kafkafake.New()
	b := kafka.NewBatching(f, kafka.BatchOptions{Window: time.Second, MaxCalls: 2, Clock: newClock()})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 1)
	go func() { _, err := b.DescribeTopics(ctx, "x"); errs <- err }()
	g.Eventually(b.Queued).Should(gomega.Equal(1))
	g.Consistently(errs).ShouldNot(gomega.Receive())
	cancel()
	g.Eventually(errs).Should(gomega.Receive(gomega.MatchError(context.Canceled)))
	b = kafka.NewBatching(f, kafka.BatchOptions{Window: time.Second, MaxCalls: 2, Clock: newClock()})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			_, err := b.DescribeTopics(context.Background(), "x")
			g.Expect(err).NotTo(gomega.HaveOccurred())
		})
	}
	wg.Wait()
}

// TestThousandsOfCallersGoInFullBatches: 2,500 creates with MaxCalls 1,000 are three requests
// of at most 1,000 topics, each caller answered for its own topic.
func TestThousandsOfCallersGoInFullBatches(t *testing.T) {
	g := gomega.NewWithT(t)
	h := newHeld()
	h.AddTopic("t-0042", 1, 1, nil)
	b := kafka.NewBatching(h, kafka.BatchOptions{Window: time.Second, Clock: newClock()})
	errs := make([]error, 2500)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = b.CreateTopic(context.Background(), fmt.Sprintf("t-%04d", i), 1, 1, nil) })
	}
	// Two full batches in flight (held), the rest queued behind them; no window needed.
	g.Eventually(func() int { return len(h.started) }).Should(gomega.Equal(2))
	g.Eventually(b.Queued).Should(gomega.Equal(500))
	close(h.release)
	wg.Wait()
	var sizes []int
	for _, c := range createdIn(h.Fake) {
		sizes = append(sizes, len(c))
	}
	g.Expect(sizes).To(gomega.Equal([]int{1000, 1000, 500}))
	for i, err := range errs {
		if i == 42 {
			g.Expect(errors.Is(err, kafka.ErrTopicExists)).To(gomega.BeTrue(), "%v", err)
			g.Expect(err.Error()).To(gomega.ContainSubstring(`"t-0042"`))
			continue
		}
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}
}

// TestForgettingAConnectionAnswersEveryCaller: the factory forgets the connection (its
// credentials changed, the idle sweep) while calls are queued and in flight; every caller returns,
// with its answer or an error, and nothing is left running.
func TestForgettingAConnectionAnswersEveryCaller(t *testing.T) {
	g := gomega.NewWithT(t)
	before := runtime.NumGoroutine()
	h := newHeld()
	clk := newClock()
	f := kafka.NewBatchingFactory(heldFactory{h}, kafka.BatchOptions{Window: time.Second, Clock: clk})
	conn := kafka.Connection{BootstrapServers: []string{"k:9092"}}
	a, err := f.Admin(context.Background(), conn)
	g.Expect(err).NotTo(gomega.HaveOccurred())
	errs := make(chan error, 40)
	for i := range 40 {
		go func() { errs <- a.CreateTopic(context.Background(), fmt.Sprintf("t-%d", i), 1, 1, nil) }()
		if i == 19 {
			g.Eventually(a.(*kafka.Batching).Queued).Should(gomega.Equal(20))
			clk.Step(time.Second)
			<-h.started // the first 20 in flight, the next 20 queued behind them
		}
	}
	g.Eventually(a.(*kafka.Batching).Queued).Should(gomega.Equal(20))
	f.Forget(conn.Key())
	close(h.release)
	for range 40 {
		g.Expect(<-errs).To(gomega.Succeed())
	}
	goroutinesBack(g, before)
}

// heldFactory hands out the held admin for every connection.
type heldFactory struct{ *held }

func (h heldFactory) Admin(context.Context, kafka.Connection) (kafka.Admin, error) {
	return h.held, nil
}
func (h heldFactory) Forget(string) bool { return true }
