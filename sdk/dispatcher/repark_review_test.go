package dispatcher_test

import (
	"fmt"
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
			t.Log(fmt.Sprintf("delivered %v, p1 end %d, p0 end %d, in flight %v, reparked %v", d.get(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 700)),
				endOffset(t, p, tier, 1), endOffset(t, p, tier, 0), dt.Gauge(reg, metrics.InFlight), dt.Gauge(reg, metrics.ReparkedTotal)))
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
