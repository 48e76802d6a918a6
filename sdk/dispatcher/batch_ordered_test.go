package dispatcher_test

import (
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/retry"
)

// TestBatchOrdered: in Ordered mode a batch holds a source partition's records consecutive and in
// offset order, a partition's batches follow each other in offset order, and a partition has at
// most one batch in flight; partitions are batched together and in parallel. A record failed in a
// batch goes to its tier and comes back in another batch.
func TestBatchOrdered(t *testing.T) {
	const n = 120
	p := newPipeline(t, "batchordered", 3, simplePolicy(2, 20*time.Millisecond), nil)
	p.cfg.Delivery.MaxInFlight = 10
	batchConfig(p, 4, 1<<20, 0)
	p.cfg.CommitInterval = nil
	h := newBatchHandler(clocktesting.NewFakeClock(time.Now()), func(d *dispatcher.Delivery) (dispatcher.Result, bool) {
		v, _ := strconv.Atoi(string(d.Record.Value))
		if v%5 == 0 && d.Attempt == 1 {
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}, true
		}
		return dispatcher.Result{Success: true}, true
	})
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h})
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i % 11)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)

	last := map[string]int64{}
	delivered, retried, batches, multi := 0, 0, 0, 0
	for delivered < n+n/5 {
		sb := received(t, h.calls, "a batch")
		batches++
		if len(sb.values) > 1 {
			multi++
		}
		for i, part := range sb.parts {
			delivered++
			if strings.Contains(part, ".retry.") {
				retried++
				continue
			}
			if prev, ok := last[part]; ok && sb.offsets[i] != prev+1 {
				t.Errorf("partition %s: offset %d delivered after %d", part, sb.offsets[i], prev)
			}
			last[part] = sb.offsets[i]
		}
	}
	h.mu.Lock()
	perPart := h.maxInFlightPart
	h.mu.Unlock()
	t.Logf("%d deliveries in %d batches (%d of several records), %d retries", delivered, batches, multi, retried)
	if perPart != 1 {
		t.Errorf("at most %d batches of one partition in flight, want 1", perPart)
	}
	if retried != n/5 {
		t.Errorf("%d retries delivered, want %d", retried, n/5)
	}
	if multi == 0 {
		t.Error("no batch held more than one record")
	}
}

// TestBatchOrderedBytesFlushKeepsOneBatch: in Ordered mode, a partition's record that would take
// the batch being filled past maxBytes waits for that batch to finish; it does not start a second
// batch of its partition, which another worker would send while the first is still in flight.
func TestBatchOrderedBytesFlushKeepsOneBatch(t *testing.T) {
	p := newPipeline(t, "batchorderedbytes", 1, simplePolicy(2, time.Second), nil)
	batchConfig(p, 100, 10, 0) // each record is 4 bytes: dd and ee fit, ff would make 12
	fc := clocktesting.NewFakeClock(time.Now())
	gate := make(chan struct{})
	h := newBatchHandler(fc, nil)
	h.release = func() { <-gate }
	dt.Produce(t, p.prod, sourceRecords(p, "dd", "ee", "ff")...)
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(open) // before the engine's stop

	if got := strings.Join(received(t, h.calls, "the first batch").values, ","); got != "dd,ee" {
		t.Fatalf("first batch %s, want dd,ee", got)
	}
	gomega.NewWithT(t).Consistently(h.calls).WithTimeout(300*time.Millisecond).ShouldNot(gomega.Receive(),
		"a second batch of the partition sent while its first is in flight")
	open()
	if got := strings.Join(received(t, h.calls, "the second batch").values, ","); got != "ff" {
		t.Errorf("second batch %s, want ff", got)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.maxInFlightPart != 1 {
		t.Errorf("at most %d batches of the partition in flight, want 1", h.maxInFlightPart)
	}
}
