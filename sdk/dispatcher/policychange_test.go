package dispatcher_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// TestShortenedPolicyKeepsWaitingRetries: a retry the old policy scheduled six hours out (its tier
// keeps its name under ByAttempt naming) is read by a dispatcher whose policy now waits at most
// 100s in that tier: it is kept, not dead-lettered, and delivered at its due time on the engine's
// clock, as the second attempt with its idempotency key.
func TestShortenedPolicyKeepsWaitingRetries(t *testing.T) {
	p := newPipeline(t, "shortened", 1, simplePolicy(3, time.Second), nil)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h, deliveries := clockHandler(fc, nil)
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, Clock: fc, Registerer: reg})

	due := fc.Now().Add(6 * time.Hour)
	rec := tierRecord(p, "waiting", "7", "1", due)
	rec.Timestamp = fc.Now().Add(-time.Hour) // written an hour ago, under the old policy
	dt.Produce(t, p.prod, rec)
	dt.Eventually(t, 20*time.Second, func() bool {
		return dt.Gauge(reg, metrics.Buffered) == 1 || endOffset(t, p, p.cfg.Topics.DeadLetter, 0) > 0
	}, "the waiting retry fetched (or dead-lettered)")
	if n := endOffset(t, p, p.cfg.Topics.DeadLetter, 0); n != 0 {
		dl := allRecords(t, p, p.cfg.Topics.DeadLetter)
		reason, _ := dt.Header(dl[0], headers.Reason)
		msg, _ := dt.Header(dl[0], headers.ErrorMessage)
		t.Fatalf("the waiting retry was dead-lettered: %s: %s", reason, msg)
	}

	fc.SetTime(due.Add(-time.Millisecond))
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.PausedPartitions) == 0 },
		"the tier partition resumed before the due time")
	select {
	case d := <-deliveries:
		t.Fatalf("attempt %d delivered at %v, before its due time %v", d.attempt, d.at, due)
	default:
	}
	fc.SetTime(due)
	if d := next(t, deliveries, "the waiting retry at its due time"); d.attempt != 2 || !d.at.Equal(due) {
		t.Fatalf("attempt %d delivered at %v, want attempt 2 at %v", d.attempt, d.at, due)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Retries[0].Name, 0) == 1 },
		"the delivered retry committed")
	if n := endOffset(t, p, p.cfg.Topics.DeadLetter, 0); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// TestHostileDueFarAhead: a tier record due further ahead than any policy could schedule (a year
// and a day) is dead-lettered as malformed at once, the record behind it delivered.
func TestHostileDueFarAhead(t *testing.T) {
	p := newPipeline(t, "hostile-due-ahead", 1, simplePolicy(3, 30*time.Millisecond), func(*dt.Request) dt.Response {
		return dt.Response{}
	})
	start(t, dispatcher.Options{Config: p.cfg})
	dt.Produce(t, p.prod,
		tierRecord(p, "hostile", "500", "1", time.Now().Add(366*24*time.Hour)),
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("behind"), Value: []byte("behind")})
	checkMalformed(t, p, headers.Due)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the record behind the hostile one delivered")
}
