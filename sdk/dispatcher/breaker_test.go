package dispatcher_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// breakerEvent is a breaker transition, or a delivery start (start), at a time of the engine's
// clock; a log of them keeps the order in which they happened.
type breakerEvent struct {
	at       time.Time
	start    bool
	from, to retry.State
	gauge    float64 // the circuit_state gauge at the transition
}

// TestCircuitBreaker: a sink that fails everything opens the breaker; while it is open nothing is
// delivered (every partition paused, in franz-go too; no attempt is spent); once openDuration has
// passed on the engine's clock half-open probes go through (failing ones reopen it); once the sink
// recovers the probes close it, every record is delivered and none is dead-lettered. The
// circuit_state gauge follows every transition. The clock moves only when the test steps it, and
// one delivery at a time (maxInFlight 1) means none admitted before a failure opened the breaker
// starts after it: the log of transitions and starts is exact, whatever the machine's speed.
func TestCircuitBreaker(t *testing.T) {
	const n = 30
	const openFor = 400 * time.Millisecond
	pol := simplePolicy(20, 20*time.Millisecond)
	pol.Backoff.MaxDelay = dt.D(50 * time.Millisecond)
	pol.CircuitBreaker = &policy.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 4, Window: dt.PD(10 * time.Second),
		OpenDuration: dt.PD(openFor), HalfOpenRequests: 2, CloseSuccessPercent: 50}
	var healthy atomic.Bool
	p := newPipeline(t, "breaker", 2, pol, func(*dt.Request) dt.Response {
		if healthy.Load() {
			return dt.Response{}
		}
		return dt.Response{Status: 503}
	})
	p.cfg.Delivery.MaxInFlight = 1
	fc := clocktesting.NewFakeClock(time.Now())
	reg := prometheus.NewRegistry()
	gauge := func() float64 { return dt.Gauge(reg, metrics.CircuitState) }
	var mu sync.Mutex
	var events []breakerEvent
	log := func(ev breakerEvent) {
		mu.Lock()
		events = append(events, ev)
		mu.Unlock()
	}
	logged := func() []breakerEvent {
		mu.Lock()
		defer mu.Unlock()
		return append([]breakerEvent(nil), events...)
	}
	opens := func() int {
		k := 0
		for _, ev := range logged() {
			if !ev.start && ev.to == retry.StateOpen {
				k++
			}
		}
		return k
	}
	sink := dispatcher.NewHTTPSink(p.cfg.Sink.URL, 1, dispatcher.WithSinkClock(fc))
	handler := dispatcher.HandlerFunc(func(ctx context.Context, d *dispatcher.Delivery) dispatcher.Result {
		log(breakerEvent{at: fc.Now(), start: true})
		return sink.Deliver(ctx, d)
	})
	r := start(t, dispatcher.Options{Config: p.cfg, Registerer: reg, Handler: handler, Clock: fc,
		OnCircuitStateChange: func(from, to retry.State) {
			log(breakerEvent{at: fc.Now(), from: from, to: to, gauge: gauge()})
		}})
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)

	dt.Eventually(t, 20*time.Second, func() bool { return opens() == 1 }, "the breaker opened")
	// Open, and the clock standing still: every partition pauses, in franz-go too (what stops the
	// fetching, not only the engine's view of it).
	all := float64(2 * (1 + len(p.cfg.Topics.Retries)))
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.PausedPartitions) == all },
		"all %v partitions paused while the breaker is open", all)
	dt.Eventually(t, 20*time.Second, func() bool {
		return len(r.e.Client().PauseFetchPartitions(nil)[p.cfg.Topics.Source]) == 2 // with nothing to add: the current set
	}, "franz-go's paused set holding both source partitions while the breaker is open")

	// Half-open after openDuration: a probe fails and reopens it.
	fc.Step(openFor - time.Millisecond)
	fc.Step(time.Millisecond)
	dt.Eventually(t, 20*time.Second, func() bool { return opens() == 2 }, "the breaker reopened after a failed probe")

	// The sink recovers; the clock moves on in small steps (retries' due times, openDuration).
	healthy.Store(true)
	dt.Eventually(t, 30*time.Second, func() bool {
		if keys, _ := p.sink.Succeeded(); keys == n {
			return true
		}
		fc.Step(10 * time.Millisecond)
		return false
	}, "all delivered after recovery")

	evs := logged()
	wantGauge := map[retry.State]float64{retry.StateClosed: 0, retry.StateHalfOpen: 1, retry.StateOpen: 2}
	var last *breakerEvent
	starts := 0 // since the last transition
	for i := range evs {
		ev := &evs[i]
		if ev.start {
			starts++
			if last == nil {
				continue
			}
			switch last.to {
			case retry.StateOpen:
				t.Errorf("a delivery started at %v while the breaker was open (since %v)", ev.at.Format("15:04:05.000"), last.at.Format("15:04:05.000"))
			case retry.StateHalfOpen:
				if starts > 2 {
					t.Errorf("%d deliveries started while half-open, want at most 2", starts)
				}
			}
			continue
		}
		t.Logf("%v %s -> %s (gauge %v)", ev.at.Format("15:04:05.000"), ev.from, ev.to, ev.gauge)
		if ev.gauge != wantGauge[ev.to] {
			t.Errorf("gauge %v in state %s", ev.gauge, ev.to)
		}
		if ev.to == retry.StateHalfOpen && last != nil && ev.at.Sub(last.at) < openFor {
			t.Errorf("half-open %v after opening, before openDuration %v", ev.at.Sub(last.at), openFor)
		}
		last, starts = ev, 0
	}
	if last == nil || last.to != retry.StateClosed {
		t.Errorf("the breaker did not close again")
	}
	if g := gauge(); g != 0 {
		t.Errorf("final gauge %v", g)
	}
	if dl := endOffset(t, p, p.cfg.Topics.DeadLetter, 0); dl != 0 {
		t.Errorf("%d records dead-lettered: the open breaker must not spend attempts", dl)
	}
}
