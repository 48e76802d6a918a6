package dispatcher_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// stuckWait is the dispatcher's stuckRetryWait, the longest wait of a failing dead letter: each
// step of the fake clock by it ends whichever wait a dead-letter write is in.
const stuckWait = 30 * time.Second

// TestStuckDeadLetterCountedOnceUndoneOnce: a dead letter the topic rejects is counted stuck
// (gauge 1, not ready) and blocks its partition's commits; once the topic takes it, it is written
// stripped, the count is undone (gauge 0, ready), the record counted dead-lettered once and its
// offset committed. A second such record is counted stuck again as exactly 1 (an undo done twice
// would leave the count at 0 and readiness true), and a stop abandons it: the count ends at 0,
// its offset uncommitted, no dead letter counted for it.
func TestStuckDeadLetterCountedOnceUndoneOnce(t *testing.T) {
	p := newPipeline(t, "review-stuck", 1, simplePolicy(2, time.Second), nil)
	src := p.cfg.Topics.Source
	reject := func() *kfake.FaultHandle {
		return p.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.cfg.Topics.DeadLetter, Err: kerr.TopicAuthorizationFailed, Count: -1})
	}
	fc := clocktesting.NewFakeClock(time.Now())
	reg := prometheus.NewRegistry()
	r := start(t, dispatcher.Options{Config: p.cfg, Handler: undeliverable, Clock: fc, Registerer: reg})
	gauge := func(name string) float64 { return dt.Gauge(reg, name) }
	deadLettered := func() float64 {
		return counterValue(t, reg, metrics.RecordsTotal, metrics.LabelOutcome, metrics.OutcomeDeadLettered)
	}
	// stepUntil steps the fake clock past every dead-letter wait until cond holds.
	stepUntil := func(cond func() bool, what string) {
		t.Helper()
		dt.Eventually(t, 30*time.Second, func() bool {
			if cond() {
				return true
			}
			fc.Step(stuckWait)
			return false
		}, "%s", what)
	}

	dt.Eventually(t, 20*time.Second, r.e.Ready, "the engine ready")
	faults := reject()
	dt.Produce(t, p.prod, &kgo.Record{Topic: src, Key: []byte("a"), Value: []byte("a")})
	stepUntil(func() bool { return gauge(metrics.StuckDeadLetters) == 1 }, "the first dead letter counted stuck")
	if r.e.Ready() || gauge(metrics.Ready) != 0 {
		t.Fatalf("ready (%v, gauge %v) while a dead letter is stuck", r.e.Ready(), gauge(metrics.Ready))
	}
	if c := p.committed(t, src, 0); c > 0 {
		t.Fatalf("offset %d committed past the stuck dead letter", c)
	}

	faults.Remove()
	stepUntil(func() bool { return p.committed(t, src, 0) == 1 }, "the stuck dead letter written and its offset committed")
	dt.Eventually(t, 10*time.Second, func() bool { return gauge(metrics.StuckDeadLetters) == 0 && gauge(metrics.Ready) == 1 },
		"the stuck count undone and the engine ready")
	if !r.e.Ready() {
		t.Fatal("not ready once the stuck dead letter was written")
	}
	if n := deadLettered(); n != 1 {
		t.Fatalf("records_total{dead_lettered} = %v, want 1", n)
	}
	if dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 2, time.Second); len(dl) != 1 || len(dl[0].Key) != 0 {
		t.Fatalf("%d dead letters (want 1, stripped)", len(dl))
	}

	reject()
	dt.Produce(t, p.prod, &kgo.Record{Topic: src, Key: []byte("b"), Value: []byte("b")})
	stepUntil(func() bool { return gauge(metrics.StuckDeadLetters) == 1 }, "the second dead letter counted stuck as 1")
	if r.e.Ready() {
		t.Fatal("ready while the second dead letter is stuck")
	}
	r.stop(t)
	dt.Eventually(t, 10*time.Second, func() bool { return gauge(metrics.StuckDeadLetters) == 0 },
		"the stuck count undone by the stop's abandon")
	if c := p.committed(t, src, 0); c != 1 {
		t.Fatalf("committed %d after the stop, want 1 (the abandoned dead letter's offset uncommitted)", c)
	}
	if n := deadLettered(); n != 1 {
		t.Fatalf("records_total{dead_lettered} = %v after abandoning the second, want 1", n)
	}
}
