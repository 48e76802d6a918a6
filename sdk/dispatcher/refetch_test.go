package dispatcher_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// TestFetchBelowCommittedReleasesSlots: when the fetch position goes back below the committed
// offset (a reset after log truncation; here a seek), the records fetched again are delivered again
// and counted as redeliveries, and their slots are released once they finish although there is
// nothing to commit for them: with maxUncommittedRecords 10, ten such records no longer stop the
// partition ("a fetch position below the committed offset ... leaks slots").
func TestFetchBelowCommittedReleasesSlots(t *testing.T) {
	p := newPipeline(t, "refetch", 1, simplePolicy(1, 10*time.Millisecond), nil)
	p.cfg.Delivery.MaxInFlight = 4
	p.cfg.Delivery.MaxUncommittedRecords = 10
	r := start(t, dispatcher.Options{Config: p.cfg})
	src := p.cfg.Topics.Source
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			dt.Produce(t, p.prod, &kgo.Record{Topic: src, Value: []byte(strconv.Itoa(i))})
		}
	}
	produce(0, 10)
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 0) == 10 }, "the first ten committed")

	r.e.Client().SetOffsets(map[string]map[int32]kgo.EpochOffset{src: {0: {Epoch: -1, Offset: 0}}})
	dt.Eventually(t, 20*time.Second, func() bool { return p.sink.Count() == 20 }, "the ten records delivered again")
	dt.Eventually(t, 10*time.Second, func() bool { return dt.Gauge(r.e.Registry(), metrics.Uncommitted) == 0 },
		"the slots of the records fetched again released (uncommitted %v)", dt.Gauge(r.e.Registry(), metrics.Uncommitted))
	if n := dt.Gauge(r.e.Registry(), metrics.RedeliveriesTotal); n != 10 {
		t.Errorf("redeliveries counted: %v, want 10", n)
	}

	produce(10, 15)
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 0) == 15 }, "the next five delivered and committed")
}
