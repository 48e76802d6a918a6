package dispatcher_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// blockingHandler blocks the delivery of the record "block" until released, ignoring its context
// (a sink call that does not notice the cancellation), and notes when that context ends; it
// delivers every other record at once.
type blockingHandler struct {
	started   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
	mu        sync.Mutex
	delivered []string
}

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{started: make(chan struct{}), release: make(chan struct{}), cancelled: make(chan struct{})}
}

func (h *blockingHandler) Deliver(ctx context.Context, d *dispatcher.Delivery) dispatcher.Result {
	if string(d.Record.Value) == "block" {
		close(h.started)
		go func() {
			select {
			case <-ctx.Done():
				close(h.cancelled)
			case <-h.release:
			}
		}()
		<-h.release
		return dispatcher.Result{Success: true}
	}
	h.mu.Lock()
	h.delivered = append(h.delivered, string(d.Record.Value))
	h.mu.Unlock()
	return dispatcher.Result{Success: true}
}

func (h *blockingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.delivered)
}

// TestRevocationReleasesItsDeliveries: with maxInFlight 1, a delivery from partition 0 that does not
// return holds the only slot while four records of partition 1 wait. Revoking partition 0 (after
// the drain timeout) or losing it cancels that delivery's context, releases its slot at once (not
// when the call returns) and schedules: partition 1's records are delivered while the leftover
// call still hangs.
func TestRevocationReleasesItsDeliveries(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remove func(e *dispatcher.Engine, parts map[string][]int32)
	}{
		{"revoked", func(e *dispatcher.Engine, parts map[string][]int32) { e.RevokePartitions(parts) }},
		{"lost", func(e *dispatcher.Engine, parts map[string][]int32) { e.LosePartitions(parts) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, "revoke-"+tc.name, 2, simplePolicy(1, 10*time.Millisecond), nil)
			p.cfg.Delivery.MaxInFlight = 1
			p.cfg.DrainTimeout = dt.PD(300 * time.Millisecond)
			h := newBlockingHandler()
			r := start(t, dispatcher.Options{Config: p.cfg, Handler: h})
			t.Cleanup(func() { close(h.release) }) // runs before the engine's stop
			prod := dt.Client(t, p.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
			src := p.cfg.Topics.Source
			dt.Produce(t, prod, &kgo.Record{Topic: src, Partition: 0, Value: []byte("block")})
			closed(t, h.started, "the blocking record delivered")
			for _, v := range []string{"a", "b", "c", "d"} {
				dt.Produce(t, prod, &kgo.Record{Topic: src, Partition: 1, Value: []byte(v)})
			}
			dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(r.e.Registry(), metrics.Buffered) == 4 },
				"partition 1's records fetched")

			tc.remove(r.e, map[string][]int32{src: {0}})
			closed(t, h.cancelled, "the context of partition 0's hanging delivery ended after the partition was "+tc.name)
			dt.Eventually(t, 5*time.Second, func() bool { return h.count() == 4 },
				"partition 1's four records delivered while the leftover call of partition 0 hangs")
			if got := dt.Gauge(r.e.Registry(), metrics.InFlight); got != 0 {
				t.Errorf("in flight: %v, want 0 (the leftover call no longer holds a slot)", got)
			}
		})
	}
}
