package dispatcher_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// TestLongRecordsWithNothingBehindAreNotReparked: a tier partition holding only records due in an
// hour (as after a sink answered every request with a long Retry-After) has nothing waiting
// behind its head, so re-parking it would only copy the records round and round, one write per
// record per tier delay, for the whole wait. Partition 0 holds three such records and nothing
// else: none is written again. Partition 1 holds one, followed by a record due in 2s: that one is
// re-parked once the short record is delivered behind it, as before (to the partition its key
// hashes to: a copy may change partitions).
func TestLongRecordsWithNothingBehindAreNotReparked(t *testing.T) {
	p := newPipeline(t, "repark-all-long", 2, longWaitPolicy(), nil)
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	d := &deliveredAt{at: map[string][]delivery{}}
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc, Registerer: reg})
	prod := dt.Client(t, p.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for i, key := range []string{"long-a", "long-b", "long-c"} {
		r := longTierRecord(p, key, 500+i, t0, t0.Add(time.Hour))
		recs = append(recs, r)
	}
	r := longTierRecord(p, "long-1", 600, t0, t0.Add(time.Hour))
	r.Partition = 1
	s := longTierRecord(p, "short-1", 700, t0, t0.Add(2*time.Second))
	s.Partition = 1
	recs = append(recs, r, s)
	dt.Produce(t, prod, recs...)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.Buffered) == 5 }, "the tier's records fetched")
	fc.Step(2 * time.Second)
	tier := p.cfg.Topics.Retries[len(p.cfg.Topics.Retries)-1].Name
	defer func() {
		if t.Failed() {
			t.Logf("delivered %v, p1 end %d, p0 end %d, in flight %v, reparked %v", d.get(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 700)),
				endOffset(t, p, tier, 1), endOffset(t, p, tier, 0), dt.Gauge(reg, metrics.InFlight), dt.Gauge(reg, metrics.ReparkedTotal))
		}
	}()
	dt.Eventually(t, 20*time.Second, func() bool {
		return len(d.get(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 700))) == 1 &&
			dt.Gauge(reg, metrics.ReparkedTotal) >= 1 && dt.Gauge(reg, metrics.InFlight) == 0
	}, "the short record delivered and the long one before it re-parked")
	if n := topicRecords(t, p, tier); n != 6 {
		t.Fatalf("the tier holds %d records, want the 5 produced and one copy: nothing waits behind the 3 of partition 0", n)
	}
	if got := dt.Gauge(reg, metrics.ReparkedTotal); got != 1 {
		t.Fatalf("%s = %v, want 1", metrics.ReparkedTotal, got)
	}
}

// TestReparkedRecordSurvivesACrashBeforeItsCommit: a dispatcher that re-parks a long record and
// stops before the commit of its offset (every commit refused, as at a crash) leaves the record
// and its copy in the tier. The next dispatcher delivers the record when due, at most twice (the
// same idempotency key), dead-letters nothing, and commits the tier to its end.
func TestReparkedRecordSurvivesACrashBeforeItsCommit(t *testing.T) {
	p := newPipeline(t, "repark-crash", 1, longWaitPolicy(), nil)
	tier := p.cfg.Topics.Retries[len(p.cfg.Topics.Retries)-1].Name
	var refuse atomic.Bool
	refuse.Store(true)
	p.c.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		if !refuse.Load() {
			return nil, nil, false
		}
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.GroupAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	d := &deliveredAt{at: map[string][]delivery{}}
	reg := prometheus.NewRegistry()
	e, err := dispatcher.New(dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	dt.Produce(t, p.prod, longTierRecord(p, "long", 500, t0, t0.Add(time.Hour)),
		longTierRecord(p, "behind-0", 1000, t0, t0.Add(2*time.Second)),
		longTierRecord(p, "behind-1", 1001, t0, t0.Add(2*time.Second)))
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.Buffered) == 3 }, "the tier's records fetched")
	fc.Step(2 * time.Second)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.ReparkedTotal) == 1 }, "the long record re-parked")
	cancel()
	select {
	case err := <-done:
		t.Logf("the first dispatcher stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the first dispatcher did not stop")
	}
	if c := p.committed(t, tier, 0); c > 0 {
		t.Fatalf("the tier committed to %d although every commit was refused", c)
	}
	refuse.Store(false)
	start(t, dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc})
	src := p.cfg.Topics.Source
	dt.Eventually(t, 20*time.Second, func() bool {
		return len(d.get(headers.IdempotencyKey(src, 0, 1000))) >= 1 && len(d.get(headers.IdempotencyKey(src, 0, 1001))) >= 1
	}, "the records behind delivered")
	fc.SetTime(t0.Add(time.Hour))
	dt.Eventually(t, 20*time.Second, func() bool {
		fc.Step(time.Second)
		return p.committed(t, tier, 0) == endOffset(t, p, tier, 0)
	}, "the tier committed to its end")
	ds := d.get(headers.IdempotencyKey(src, 0, 500))
	t.Logf("the long record: %d deliveries %v; the tier holds %d records", len(ds), ds, endOffset(t, p, tier, 0))
	if len(ds) < 1 || len(ds) > 2 {
		t.Fatalf("the long record delivered %d times, want once or twice (its copy)", len(ds))
	}
	for _, x := range ds {
		if x.at.Before(t0.Add(time.Hour)) {
			t.Fatalf("the long record delivered at %v, before it was due", x.at)
		}
	}
	if n := topicRecords(t, p, p.cfg.Topics.DeadLetter); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}
