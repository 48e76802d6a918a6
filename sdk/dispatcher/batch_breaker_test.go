package dispatcher_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// probeHarness is a batch pipeline whose breaker opens on one failure and closes on one successful
// probe (halfOpenRequests 1), on a fake clock, logging the breaker's transitions.
type probeHarness struct {
	p   *pipeline
	fc  *clocktesting.FakeClock
	h   *batchHandler
	reg *prometheus.Registry
	r   *running

	mu  sync.Mutex
	log []retry.State // the states moved to
}

const probeWait = 10 * time.Second // the batch's maxWait

func newProbeHarness(t *testing.T, group string) *probeHarness {
	pol := simplePolicy(3, 10*time.Minute)
	pol.Deadline = dt.PD(time.Hour)
	pol.CircuitBreaker = &policy.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 1, Window: dt.PD(time.Hour),
		OpenDuration: dt.PD(time.Second), HalfOpenRequests: 1, CloseSuccessPercent: 50}
	ph := &probeHarness{p: newPipeline(t, group, 1, pol, nil), fc: clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond)),
		reg: prometheus.NewRegistry()}
	batchConfig(ph.p, 100, 1<<20, probeWait)
	ph.h = newBatchHandler(ph.fc, func(d *dispatcher.Delivery) (dispatcher.Result, bool) {
		if string(d.Record.Value) == "down" {
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}, true
		}
		return dispatcher.Result{Success: true}, true
	})
	ph.r = start(t, dispatcher.Options{Config: ph.p.cfg, Handler: ph.h, BatchHandler: ph.h, Clock: ph.fc, Registerer: ph.reg,
		OnCircuitStateChange: func(_, to retry.State) {
			ph.mu.Lock()
			ph.log = append(ph.log, to)
			ph.mu.Unlock()
		}})
	return ph
}

func (ph *probeHarness) states() []retry.State {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	return append([]retry.State(nil), ph.log...)
}

// stepUntil moves the clock by step until cond holds.
func (ph *probeHarness) stepUntil(t *testing.T, step time.Duration, cond func() bool, what string) {
	t.Helper()
	dt.Eventually(t, 30*time.Second, func() bool {
		if cond() {
			return true
		}
		ph.fc.Step(step)
		return false
	}, "%s", what)
}

func (ph *probeHarness) inFlight() float64 { return dt.Gauge(ph.reg, metrics.InFlight) }

// openThenProbe opens the breaker with a failing batch, then lets a record whose deadline falls
// within the batch's wait be admitted as the half-open probe into a batch being filled. It returns
// the probe's deadline.
func (ph *probeHarness) openThenProbe(t *testing.T) time.Time {
	t.Helper()
	p := ph.p
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("down"), Timestamp: ph.fc.Now()})
	ph.stepUntil(t, time.Second, func() bool { return len(ph.states()) > 0 }, "the breaker opened on the failed batch")
	received(t, ph.h.calls, "the failing batch")
	if s := ph.states(); s[0] != retry.StateOpen {
		t.Fatalf("breaker moved to %v, want open", s)
	}
	dt.ReadTopic(t, p.c, p.cfg.Topics.Retries[0].Name, 1, 20*time.Second)
	dt.Eventually(t, 20*time.Second, func() bool { return ph.inFlight() == 0 }, "the failed record settled")

	deadline := ph.fc.Now().Add(probeWait / 2)
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("probe"), Timestamp: deadline.Add(-time.Hour)})
	ph.stepUntil(t, 20*time.Millisecond, func() bool { return ph.inFlight() == 1 }, "the probe admitted into the batch")
	if now := ph.fc.Now(); !now.Before(deadline) {
		t.Fatalf("the probe was admitted at %v, past its deadline %v: too slow to test the batch's wait", now, deadline)
	}
	if got := dt.Gauge(ph.reg, metrics.CircuitState); got != 1 {
		t.Fatalf("circuit_state %v with the probe admitted, want 1 (half-open)", got)
	}
	return deadline
}

// TestBatchProbeNeverSentKeepsTheBreakerHalfOpen: the half-open probe, admitted into a batch being
// filled, passes its deadline before the batch is sent: it is dead-lettered without reaching the
// sink, and its permit, handed back unused, neither closes the breaker (the sink may still be down)
// nor opens it; the next record is admitted as the probe, and its success closes the breaker.
func TestBatchProbeNeverSentKeepsTheBreakerHalfOpen(t *testing.T) {
	ph := newProbeHarness(t, "batchprobe")
	p := ph.p
	deadline := ph.openThenProbe(t)

	ph.stepUntil(t, time.Second, func() bool { return endOffset(t, p, p.cfg.Topics.DeadLetter, 0) == 1 }, "the probe dead-lettered")
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if reason, _ := dt.Header(dl[0], headers.Reason); string(dl[0].Value) != "probe" || reason != string(retry.ReasonDeadlineExceeded) {
		t.Fatalf("dead letter %q reason %q, want probe, %s", dl[0].Value, reason, retry.ReasonDeadlineExceeded)
	}
	if !ph.fc.Now().After(deadline) {
		t.Fatalf("dead-lettered at %v, before its deadline %v", ph.fc.Now(), deadline)
	}
	select {
	case sb := <-ph.h.calls:
		t.Fatalf("batch %v sent: the probe past its deadline must not reach the sink", sb.values)
	default:
	}
	if got, s := dt.Gauge(ph.reg, metrics.CircuitState), ph.states(); got != 1 || len(s) != 2 || s[1] != retry.StateHalfOpen {
		t.Fatalf("circuit_state %v, transitions to %v, after the probe was dead-lettered unsent; want 1 (half-open), [Open HalfOpen]", got, s)
	}

	// The permit is free again: the next record is the probe, and its success closes the breaker.
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("next"), Timestamp: ph.fc.Now()})
	ph.stepUntil(t, time.Second, func() bool { return len(ph.h.calls) > 0 }, "the next probe sent")
	if sb := <-ph.h.calls; strings.Join(sb.values, ",") != "next" {
		t.Fatalf("batch %v, want next", sb.values)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(ph.reg, metrics.CircuitState) == 0 }, "the breaker closed on the probe's success")
	want := []retry.State{retry.StateOpen, retry.StateHalfOpen, retry.StateClosed}
	if s := ph.states(); strings.Join(stateNames(s), ",") != strings.Join(stateNames(want), ",") {
		t.Errorf("transitions to %v, want %v", s, want)
	}
}

// TestBatchProbeRevokedKeepsTheBreakerHalfOpen: the half-open probe's partition is revoked while
// its batch fills: the probe is abandoned unsent and the breaker stays half-open.
func TestBatchProbeRevokedKeepsTheBreakerHalfOpen(t *testing.T) {
	ph := newProbeHarness(t, "batchproberevoke")
	ph.openThenProbe(t)
	ph.r.e.RevokePartitions(map[string][]int32{ph.p.cfg.Topics.Source: {0}})
	dt.Eventually(t, 20*time.Second, func() bool { return ph.inFlight() == 0 }, "the probe abandoned")
	select {
	case sb := <-ph.h.calls:
		t.Fatalf("batch %v sent for a revoked partition", sb.values)
	default:
	}
	if got, s := dt.Gauge(ph.reg, metrics.CircuitState), ph.states(); got != 1 || len(s) != 2 || s[1] != retry.StateHalfOpen {
		t.Fatalf("circuit_state %v, transitions to %v, after the probe was abandoned unsent; want 1 (half-open), [Open HalfOpen]", got, s)
	}
}

func stateNames(s []retry.State) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = string(v)
	}
	return out
}
