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

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/internal/dispatcher/metrics"
	"github.com/retryops/retry-operator/internal/retry"
)

type transition struct {
	at       time.Time
	from, to retry.State
	gauge    float64
}

// TestCircuitBreaker: a sink that fails everything opens the breaker; while it is open nothing is
// delivered (fetching pauses, no attempt is spent); after openDuration half-open probes go through
// (failing ones reopen it); once the sink recovers the probes close it, every record is delivered
// and none is dead-lettered. The circuit_state gauge follows every transition.
func TestCircuitBreaker(t *testing.T) {
	const n = 30
	const openFor = 400 * time.Millisecond
	pol := simplePolicy(20, 20*time.Millisecond)
	pol.Backoff.MaxDelay = dt.D(50 * time.Millisecond)
	pol.CircuitBreaker = &v1.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 4, Window: dt.PD(10 * time.Second),
		OpenDuration: dt.PD(openFor), HalfOpenRequests: 2, CloseSuccessPercent: 50}
	var healthy sync.Map
	p := newPipeline(t, "breaker", 2, pol, func(r *dt.Request) dt.Response {
		if _, ok := healthy.Load("yes"); ok {
			return dt.Response{}
		}
		return dt.Response{Status: 503}
	})
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	var trans []transition
	gauge := func() float64 { return dt.Gauge(reg, metrics.CircuitState) }
	pausedWhileOpen := make(chan float64, 10)
	// franz-go's own paused set while the breaker is open: what stops the fetching, not only the
	// engine's view of it.
	var eng atomic.Pointer[dispatcher.Engine]
	franzPaused := make(chan map[string][]int32, 10)
	// Delivery starts as the dispatcher makes them (the sink may see a request later).
	var startsMu sync.Mutex
	var starts []time.Time
	sinkHandler := dispatcher.NewHTTPSink(p.cfg.Sink.URL, 10)
	handler := dispatcher.HandlerFunc(func(ctx context.Context, d *dispatcher.Delivery) dispatcher.Result {
		startsMu.Lock()
		starts = append(starts, time.Now())
		startsMu.Unlock()
		return sinkHandler.Deliver(ctx, d)
	})
	r := start(t, dispatcher.Options{Config: p.cfg, Registerer: reg, Handler: handler, OnCircuitStateChange: func(from, to retry.State) {
		mu.Lock()
		trans = append(trans, transition{at: time.Now(), from: from, to: to, gauge: gauge()})
		mu.Unlock()
		if to == retry.StateOpen {
			go func() { // fetching pauses while the breaker is open
				deadline := time.Now().Add(openFor * 3 / 4)
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				v := dt.Gauge(reg, metrics.PausedPartitions)
				for v < 2 && time.Now().Before(deadline) {
					<-tick.C
					v = dt.Gauge(reg, metrics.PausedPartitions)
				}
				select {
				case pausedWhileOpen <- v:
				default:
				}
				var fp map[string][]int32
				for time.Now().Before(deadline) {
					if e := eng.Load(); e != nil {
						fp = e.Client().PauseFetchPartitions(nil) // with nothing to add: the current set
						if len(fp[p.cfg.Topics.Source]) == 2 {
							break
						}
					}
					<-tick.C
				}
				select {
				case franzPaused <- fp:
				default:
				}
			}()
		}
	}})
	eng.Store(r.e)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)
	transitions := func() []transition {
		mu.Lock()
		defer mu.Unlock()
		return append([]transition(nil), trans...)
	}
	// Let it open, half-open and reopen at least once on a failing sink.
	dt.Eventually(t, 20*time.Second, func() bool {
		opens := 0
		for _, tr := range transitions() {
			if tr.to == retry.StateOpen {
				opens++
			}
		}
		return opens >= 2
	}, "the breaker opened twice")
	healthy.Store("yes", true)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == n
	}, "all delivered after recovery")

	tr := transitions()
	startsMu.Lock()
	begun := append([]time.Time(nil), starts...)
	startsMu.Unlock()
	wantGauge := map[retry.State]float64{retry.StateClosed: 0, retry.StateHalfOpen: 1, retry.StateOpen: 2}
	// A probe admitted while half-open may start just after another probe's failure reopened the
	// breaker; nothing else may start while it is open.
	late := 20 * time.Millisecond
	if raceEnabled {
		late = 200 * time.Millisecond
	}
	closed := false
	for i, x := range tr {
		t.Logf("%v %s -> %s (gauge %v)", x.at.Format("15:04:05.000"), x.from, x.to, x.gauge)
		if x.gauge != wantGauge[x.to] {
			t.Errorf("gauge %v in state %s", x.gauge, x.to)
		}
		if x.to == retry.StateClosed {
			closed = true
		}
		if x.to != retry.StateOpen {
			continue
		}
		end := x.at.Add(openFor)
		if i+1 < len(tr) {
			end = tr[i+1].at
		}
		allowed := 0
		if x.from == retry.StateHalfOpen {
			allowed = 1 // halfOpenRequests - 1 probes may still be starting
		}
		n := 0
		for _, st := range begun {
			if st.After(x.at) && st.Before(end) {
				if allowed > 0 && st.Before(x.at.Add(late)) {
					allowed--
					continue
				}
				n++
			}
		}
		if n > 0 {
			t.Errorf("%d deliveries started while the breaker was open (%v..%v)", n, x.at.Format("15:04:05.000"), end.Format("15:04:05.000"))
		}
		if i+1 < len(tr) && tr[i+1].to == retry.StateHalfOpen {
			// Half-open: at most HalfOpenRequests deliveries start until the next transition.
			hEnd := time.Now()
			if i+2 < len(tr) {
				hEnd = tr[i+2].at
			}
			probes := 0
			for _, st := range begun {
				if !st.Before(tr[i+1].at) && st.Before(hEnd) {
					probes++
				}
			}
			if probes > 2 {
				t.Errorf("%d deliveries started while half-open, want at most 2", probes)
			}
		}
	}
	if paused := <-pausedWhileOpen; paused < 2 {
		t.Errorf("%v partitions paused while the breaker was open, want all of them", paused)
	}
	if fp := <-franzPaused; len(fp[p.cfg.Topics.Source]) != 2 {
		t.Errorf("franz-go's paused partitions while the breaker was open: %v; want both source partitions", fp)
	}
	if !closed || tr[len(tr)-1].to != retry.StateClosed {
		t.Errorf("the breaker did not close again")
	}
	if g := gauge(); g != 0 {
		t.Errorf("final gauge %v", g)
	}
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 300*time.Millisecond)
	if len(dl) != 0 {
		t.Errorf("%d records dead-lettered: the open breaker must not spend attempts", len(dl))
	}
}
