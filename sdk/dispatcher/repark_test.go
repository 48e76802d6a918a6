package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
	"github.com/retryops/retry-operator/sdk/policy"
)

// deliveredAt records, per idempotency key, the attempts delivered and the engine's time of each.
type deliveredAt struct {
	mu sync.Mutex
	at map[string][]delivery
}

func (d *deliveredAt) handler(fc *clocktesting.FakeClock) dispatcher.Handler {
	return dispatcher.HandlerFunc(func(_ context.Context, del *dispatcher.Delivery) dispatcher.Result {
		d.mu.Lock()
		d.at[del.IdempotencyKey] = append(d.at[del.IdempotencyKey], delivery{del.Attempt, fc.Now()})
		d.mu.Unlock()
		return dispatcher.Result{Success: true}
	})
}

func (d *deliveredAt) get(key string) []delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.at[key])
}

// longTierRecord is a record of the pipeline's last tier waiting for its third delivery: written
// at ts, due at due, with original offset off.
func longTierRecord(p *pipeline, key string, off int, ts, due time.Time) *kgo.Record {
	r := tierRecord(p, key, fmt.Sprint(off), "2", due)
	r.Topic = p.cfg.Topics.Retries[len(p.cfg.Topics.Retries)-1].Name
	r.Timestamp = ts
	r.Value = make([]byte, 8<<10) // many producer batches, fetched a few at a time
	return r
}

// TestLongRetryAfterHoldsNothingUp: a record told by its sink to wait an hour (retryAfter.maxDelay
// 1h, backoff.maxDelay 2s) waits at the head of the longest tier, whose look-ahead window holds
// 100 records (fetched 64 KiB at a time); the 1,000 records behind it, each due 2s after it was written, are each delivered
// at its own due time (on the engine's clock, stepped 50ms at a time), none dead-lettered. The long
// record is written again to the tail of its tier, headers unchanged, and delivered at its own due
// time as its third attempt, with its idempotency key.
func TestLongRetryAfterHoldsNothingUp(t *testing.T) {
	pol := &policy.Spec{
		MaxAttempts: 3,
		Backoff:     policy.Backoff{InitialDelay: dt.D(time.Second), Multiplier: "2", MaxDelay: dt.D(2 * time.Second)},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"429", "500-599"}},
		}},
		RetryAfter: &policy.RetryAfter{Mode: policy.RetryAfterHonor, MaxDelay: dt.PD(time.Hour)},
	}
	p := newPipeline(t, "long-retry-after", 1, pol, nil)
	p.cfg.Delivery.MaxBufferedRecords = 100
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	d := &deliveredAt{at: map[string][]delivery{}}
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: d.handler(fc), Clock: fc, Registerer: reg,
		KafkaOptions: []kgo.Opt{kgo.FetchMaxBytes(64 << 10), kgo.FetchMaxPartitionBytes(64 << 10)}})

	const n, delay, step = 1000, 2 * time.Second, 50 * time.Millisecond
	long := longTierRecord(p, "long", 500, t0, t0.Add(time.Hour))
	recs := []*kgo.Record{long}
	dues := make([]time.Time, n)
	for i := range n {
		ts := t0.Add(time.Duration(i) * time.Millisecond)
		dues[i] = ts.Add(delay)
		recs = append(recs, longTierRecord(p, fmt.Sprint("behind-", i), 1000+i, ts, dues[i]))
	}
	dt.Produce(t, p.prod, recs...)
	src := p.cfg.Topics.Source
	key := func(i int) string { return headers.IdempotencyKey(src, 0, int64(1000+i)) }

	for now := t0.Add(delay); !now.After(dues[n-1].Add(step)); now = now.Add(step) {
		fc.SetTime(now)
		want := 0
		for _, due := range dues {
			if !due.After(now) {
				want++
			}
		}
		dt.Eventually(t, 20*time.Second, func() bool {
			got := 0
			for i := range want {
				if len(d.get(key(i))) > 0 {
					got++
				}
			}
			return got == want
		}, fmt.Sprintf("the %d records due by +%v delivered", want, now.Sub(t0)))
	}
	for i := range n {
		ds := d.get(key(i))
		if len(ds) != 1 || ds[0].attempt != 3 || ds[0].at.Before(dues[i]) || ds[0].at.Sub(dues[i]) >= step {
			t.Fatalf("record %d, due at +%v: deliveries %+v; want one, attempt 3, within %v of its due time", i, dues[i].Sub(t0), ds, step)
		}
	}
	if ds := d.get(headers.IdempotencyKey(src, 0, 500)); len(ds) != 0 {
		t.Fatalf("the long record delivered before its due time: %+v", ds)
	}
	if n := endOffset(t, p, p.cfg.Topics.DeadLetter, 0); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}

	// Written again to the tail of its tier, as it was.
	tier := long.Topic
	all := dt.ReadTopic(t, p.c, tier, int(endOffset(t, p, tier, 0)), 20*time.Second)
	again := all[len(all)-1]
	if len(all) < n+2 || string(again.Key) != "long" || !slices.EqualFunc(again.Headers, long.Headers, func(a, b kgo.RecordHeader) bool {
		return a.Key == b.Key && string(a.Value) == string(b.Value)
	}) {
		t.Fatalf("the tier's last record (of %d) is %q with headers %v; want the long record again with headers %v", len(all), again.Key, again.Headers, long.Headers)
	}

	fc.SetTime(t0.Add(time.Hour))
	dt.Eventually(t, 20*time.Second, func() bool { return len(d.get(headers.IdempotencyKey(src, 0, 500))) > 0 },
		"the long record delivered at its due time")
	if ds := d.get(headers.IdempotencyKey(src, 0, 500)); len(ds) != 1 || ds[0].attempt != 3 || !ds[0].at.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the long record: %+v; want one delivery, attempt 3, at +1h", ds)
	}
	end := endOffset(t, p, tier, 0)
	if end != n+2 {
		t.Fatalf("the tier holds %d records, want %d: the long record written again once", end, n+2)
	}
	dt.Eventually(t, 20*time.Second, func() bool {
		fc.Step(time.Second) // the committer waits for commitInterval on the clock
		return p.committed(t, tier, 0) == end
	}, "the tier committed to its end")
	if got := dt.Gauge(reg, metrics.ReparkedTotal); got != 1 {
		t.Fatalf("%s = %v, want 1", metrics.ReparkedTotal, got)
	}
}

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
