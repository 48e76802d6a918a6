package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
)

// longWaitPolicy waits 1s and 2s between its three deliveries and honours a Retry-After of up to
// an hour.
func longWaitPolicy() *policy.Spec {
	p := simplePolicy(3, time.Second)
	p.Backoff.MaxDelay = dt.D(2 * time.Second)
	p.RetryAfter = &policy.RetryAfter{Mode: policy.RetryAfterHonor, MaxDelay: dt.PD(time.Hour)}
	return p
}

// longAhead starts an engine on a fake clock and produces to the pipeline's last tier a record due
// in an hour followed by behind records due 2s after they were written, at t0; it returns the
// clock, the deliveries and the metrics.
func longAhead(t *testing.T, p *pipeline, behind int) (*clocktesting.FakeClock, *deliveredAt, *prometheus.Registry) {
	t.Helper()
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	d := &deliveredAt{at: map[string][]delivery{}}
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc, Registerer: reg})
	recs := []*kgo.Record{longTierRecord(p, "long", 500, t0, t0.Add(time.Hour))}
	for i := range behind {
		recs = append(recs, longTierRecord(p, fmt.Sprint("behind-", i), 1000+i, t0, t0.Add(2*time.Second)))
	}
	dt.Produce(t, p.prod, recs...)
	return fc, d, reg
}

// TestLongRecordPastItsDeadlineIsNotReparked: under a deadline the record's due time is past (a
// deadline shortened since it was scheduled), the long record is dead-lettered deadline_exceeded
// with its two deliveries when it would be re-parked, not written again; the records behind it
// are delivered.
func TestLongRecordPastItsDeadlineIsNotReparked(t *testing.T) {
	pol := longWaitPolicy()
	pol.Deadline = dt.PD(10 * time.Minute)
	p := newPipeline(t, "repark-deadline", 1, pol, nil)
	fc, d, reg := longAhead(t, p, 5)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.Buffered) == 6 }, "the tier's records fetched")
	fc.Step(2 * time.Second)
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	reason, _ := dt.Header(dl[0], headers.Reason)
	attempts, _ := dt.Header(dl[0], headers.Attempts)
	msg, _ := dt.Header(dl[0], headers.ErrorMessage)
	if string(dl[0].Key) != "long" || reason != headers.ReasonDeadlineExceeded || attempts != "2" || !strings.Contains(msg, "deadline") {
		t.Fatalf("dead letter %q: reason %s, attempts %s, message %q; want long, %s, 2", dl[0].Key, reason, attempts, msg, headers.ReasonDeadlineExceeded)
	}
	src := p.cfg.Topics.Source
	dt.Eventually(t, 20*time.Second, func() bool {
		for i := range 5 {
			if len(d.get(headers.IdempotencyKey(src, 0, int64(1000+i)))) != 1 {
				return false
			}
		}
		return true
	}, "the records behind delivered")
	if n := endOffset(t, p, dl[0].Topic, 0); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if n := endOffset(t, p, p.cfg.Topics.Retries[1].Name, 0); n != 6 {
		t.Fatalf("the tier holds %d records, want the 6 produced: nothing re-parked", n)
	}
	if got := dt.Gauge(reg, metrics.ReparkedTotal); got != 0 {
		t.Fatalf("%s = %v, want 0", metrics.ReparkedTotal, got)
	}
}

// TestReparkWriteFailureDeadLetters: when the tier refuses the re-parked record, it is
// dead-lettered undeliverable (RetryProduceFailed) with the deliveries it had, its due time in the
// message; nothing is lost and the records behind it are delivered.
func TestReparkWriteFailureDeadLetters(t *testing.T) {
	p := newPipeline(t, "repark-refused", 1, longWaitPolicy(), nil)
	tier := p.cfg.Topics.Retries[1].Name
	tierID := topicID(t, p, tier)
	var refuse atomic.Bool
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			if (rt.Topic == tier || rt.TopicID == tierID) && refuse.Load() {
				return rejectProduce(req, kerr.InvalidRecord), nil, true
			}
		}
		return nil, nil, false
	})
	fc, d, reg := longAhead(t, p, 3)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.Buffered) == 4 }, "the tier's records fetched")
	refuse.Store(true)
	fc.Step(2 * time.Second)
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dl))
	}
	reason, _ := dt.Header(dl[0], headers.Reason)
	et, _ := dt.Header(dl[0], headers.ErrorType)
	attempts, _ := dt.Header(dl[0], headers.Attempts)
	msg, _ := dt.Header(dl[0], headers.ErrorMessage)
	t.Logf("dead letter: %s %s %s: %s", reason, et, attempts, msg)
	if string(dl[0].Key) != "long" || reason != headers.ReasonUndeliverable || et != headers.ErrorTypeRetryProduceFailed ||
		attempts != "2" || !strings.Contains(msg, "re-parking") {
		t.Fatalf("dead letter %q: reason %s, error type %s, attempts %s, message %q", dl[0].Key, reason, et, attempts, msg)
	}
	src := p.cfg.Topics.Source
	dt.Eventually(t, 20*time.Second, func() bool {
		for i := range 3 {
			if len(d.get(headers.IdempotencyKey(src, 0, int64(1000+i)))) != 1 {
				return false
			}
		}
		return true
	}, "the records behind delivered")
}

// TestDrainingTierReparks: in a tier an earlier policy left (listed in topics.draining, delays
// unknown), a record due in an hour is written again to the tail of that tier after a minute, so
// that the records behind it are delivered; the tier is committed to its end only once the long
// record is delivered, at its due time.
func TestDrainingTierReparks(t *testing.T) {
	p := newPipeline(t, "repark-draining", 1, longWaitPolicy(), nil)
	p.cfg.Delivery.MaxBufferedRecords = 10
	old := p.cfg.Topics.Source + ".retry.9"
	if _, err := kadm.NewClient(p.prod).CreateTopic(context.Background(), 1, 1, nil, old); err != nil {
		t.Fatal(err)
	}
	p.cfg.Topics.Draining = []string{old}
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	d := &deliveredAt{at: map[string][]delivery{}}
	start(t, dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc,
		KafkaOptions: []kgo.Opt{kgo.FetchMaxBytes(64 << 10), kgo.FetchMaxPartitionBytes(64 << 10)}})
	long := longTierRecord(p, "long", 500, t0, t0.Add(time.Hour))
	recs := []*kgo.Record{long}
	const behind = 300 // more than one producer batch, and so one fetch
	for i := range behind {
		recs = append(recs, longTierRecord(p, fmt.Sprint("behind-", i), 1000+i, t0, t0.Add(2*time.Second)))
	}
	for _, r := range recs {
		r.Topic = old
	}
	dt.Produce(t, p.prod, recs...)
	src := p.cfg.Topics.Source
	fc.SetTime(t0.Add(time.Minute))
	dt.Eventually(t, 20*time.Second, func() bool {
		for i := range behind {
			if len(d.get(headers.IdempotencyKey(src, 0, int64(1000+i)))) != 1 {
				return false
			}
		}
		return true
	}, "the records behind the long one delivered")
	if n := endOffset(t, p, old, 0); n != behind+2 {
		t.Fatalf("the draining tier holds %d records, want %d: the long record written again once", n, behind+2)
	}
	if c := p.committed(t, old, 0); c >= behind+2 {
		t.Fatalf("the draining tier committed to %d, its end, while the long record waits", c)
	}
	fc.SetTime(t0.Add(time.Hour))
	dt.Eventually(t, 20*time.Second, func() bool { return len(d.get(headers.IdempotencyKey(src, 0, 500))) == 1 },
		"the long record delivered at its due time")
	dt.Eventually(t, 20*time.Second, func() bool {
		fc.Step(time.Second) // the committer waits for commitInterval on the clock
		return p.committed(t, old, 0) == behind+2
	}, "the draining tier committed to its end")
}

// TestReparkIgnoresAFutureTimestamp: a long record whose Kafka timestamp is years ahead (a
// producer's clock, or a forged record) waits in its tier from when it was fetched: it is
// re-parked after the tier's delay all the same, not left holding the tier for years.
func TestReparkIgnoresAFutureTimestamp(t *testing.T) {
	p := newPipeline(t, "repark-future", 1, longWaitPolicy(), nil)
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	d := &deliveredAt{at: map[string][]delivery{}}
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc, Registerer: reg})
	dt.Produce(t, p.prod,
		longTierRecord(p, "long", 500, t0.AddDate(10, 0, 0), t0.Add(time.Hour)),
		longTierRecord(p, "behind", 1000, t0, t0.Add(2*time.Second)))
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.Buffered) == 2 }, "the tier's records fetched")
	fc.Step(2 * time.Second)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.ReparkedTotal) == 1 },
		"the long record re-parked after the tier's delay")
	if ds := d.get(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 1000)); len(ds) != 1 {
		t.Fatalf("the record behind: %+v, want one delivery", ds)
	}
}
