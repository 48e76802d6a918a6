package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
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
