package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// These tests run the engine on a fake clock: time moves only when the test steps it, and the
// tests wait for conditions (a delivery, a gauge, a timer set on the clock), never for time to pass.

// delivery is one call of the test handler: the attempt, and the engine's time when it was made.
type delivery struct {
	attempt int32
	at      time.Time
}

// clockHandler answers every delivery with fail's result (success when fail is nil or returns
// false) and reports each on the returned channel with the clock's time.
func clockHandler(fc *clocktesting.FakeClock, fail func(d *dispatcher.Delivery) bool) (dispatcher.Handler, <-chan delivery) {
	ch := make(chan delivery, 16)
	return dispatcher.HandlerFunc(func(_ context.Context, d *dispatcher.Delivery) dispatcher.Result {
		ch <- delivery{d.Attempt, fc.Now()}
		if fail != nil && fail(d) {
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}
		}
		return dispatcher.Result{Success: true}
	}), ch
}

func next(t *testing.T, ch <-chan delivery, what string) delivery {
	t.Helper()
	return received(t, ch, what)
}

// TestRetryDeliveredWhenDue: a retry-tier record is delivered again exactly at its due time on the
// engine's clock. A millisecond before it the engine has resumed the tier partition for it (the
// scheduler ran at that time) but not delivered it; at the due time it delivers it.
func TestRetryDeliveredWhenDue(t *testing.T) {
	const delay = time.Hour // far beyond the test's timeouts: only the fake clock can bring it
	p := newPipeline(t, "due", 1, simplePolicy(2, delay), nil)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h, deliveries := clockHandler(fc, func(d *dispatcher.Delivery) bool { return d.Attempt == 1 })
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, Clock: fc, Registerer: reg})
	gauge := func(name string) float64 { return dt.Gauge(reg, name) }

	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("x")})
	first := next(t, deliveries, "the first delivery")
	tier := dt.ReadTopic(t, p.c, p.cfg.Topics.Retries[0].Name, 1, 20*time.Second)
	if len(tier) != 1 {
		t.Fatalf("%d retry records, want 1", len(tier))
	}
	v, _ := dt.Header(tier[0], headers.Due)
	due, err := headers.ParseTime(v)
	if err != nil || !due.Equal(first.at.Add(delay)) {
		t.Fatalf("due %q (%v), want the first failure %v plus %v", v, err, first.at, delay)
	}

	// Fetched and waiting: the tier partition is paused until shortly before the record is due.
	dt.Eventually(t, 20*time.Second, func() bool {
		return gauge(metrics.Buffered) == 1 && gauge(metrics.PausedPartitions) == 1
	}, "the retry record fetched and its partition paused")

	fc.SetTime(due.Add(-time.Millisecond))
	// The scheduler ran at due-1ms: it resumed the partition, in the same pass that would have
	// started the delivery.
	dt.Eventually(t, 20*time.Second, func() bool { return gauge(metrics.PausedPartitions) == 0 },
		"the tier partition resumed before the due time")
	if b, f := gauge(metrics.Buffered), gauge(metrics.InFlight); b != 1 || f != 0 {
		t.Fatalf("a millisecond before the due time: %v buffered, %v in flight; want 1 and 0", b, f)
	}
	select {
	case d := <-deliveries:
		t.Fatalf("attempt %d delivered at %v, before its due time %v", d.attempt, d.at, due)
	default:
	}

	fc.SetTime(due)
	if d := next(t, deliveries, "the retry at its due time"); d.attempt != 2 || !d.at.Equal(due) {
		t.Fatalf("attempt %d delivered at %v, want attempt 2 at %v", d.attempt, d.at, due)
	}
}

// TestCommitIntervalOnClock: after a commit, the next one waits for commitInterval on the engine's
// clock: nothing is committed a millisecond before the interval has passed, and the finished
// record is committed once it has.
func TestCommitIntervalOnClock(t *testing.T) {
	const interval = time.Hour
	p := newPipeline(t, "interval", 1, simplePolicy(2, time.Second), nil)
	p.cfg.CommitInterval = dt.PD(interval)
	src := p.cfg.Topics.Source
	fc := clocktesting.NewFakeClock(time.Now())
	h, deliveries := clockHandler(fc, nil)
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, Clock: fc})

	// Nothing was committed before: the first finished record is committed at once.
	dt.Produce(t, p.prod, &kgo.Record{Topic: src, Value: []byte("a")})
	next(t, deliveries, "the first record")
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 0) == 1 }, "the first commit")

	dt.Produce(t, p.prod, &kgo.Record{Topic: src, Value: []byte("b")})
	next(t, deliveries, "the second record")
	// The committer waits for the interval on the clock (the only timer set in this test).
	dt.Eventually(t, 20*time.Second, fc.HasWaiters, "the committer waiting for the interval")
	if c := p.committed(t, src, 0); c != 1 {
		t.Fatalf("committed %d before the interval passed, want 1", c)
	}
	fc.Step(interval - time.Millisecond)
	if !fc.HasWaiters() {
		t.Fatal("the committer's timer fired before the interval passed")
	}
	if c := p.committed(t, src, 0); c != 1 {
		t.Fatalf("committed %d a millisecond before the interval passed, want 1", c)
	}
	fc.Step(time.Millisecond)
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 0) == 2 }, "the commit once the interval passed")
}
