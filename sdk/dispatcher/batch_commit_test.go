package dispatcher_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/retry"
)

// TestBatchCommitsAfterWrites: a batch's records are committed only once their retry-tier and
// dead-letter records are written. With those writes refused (and retried by the producer), the
// delivered record before them is committed but the source offset goes no further, however often
// the writes were tried; once they are accepted, the batch is committed.
func TestBatchCommitsAfterWrites(t *testing.T) {
	p := newPipeline(t, "batchcommit", 1, simplePolicy(3, time.Hour), nil)
	batchConfig(p, 3, 1<<20, 10*time.Second)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, func(d *dispatcher.Delivery) (dispatcher.Result, bool) {
		switch string(d.Record.Value) {
		case "transient":
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}, true
		case "bad":
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 400}}, true
		}
		return dispatcher.Result{Success: true}, true
	})
	held := map[string]bool{p.cfg.Topics.Retries[0].Name: true, p.cfg.Topics.DeadLetter: true}
	heldIDs := map[[16]byte]bool{}
	for n := range held {
		heldIDs[topicID(t, p, n)] = true
	}
	var release atomic.Bool
	var refused atomic.Int32
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			if (held[rt.Topic] || heldIDs[rt.TopicID]) && !release.Load() {
				refused.Add(1)
				return rejectProduce(req, kerr.NotLeaderForPartition), nil, true
			}
		}
		return nil, nil, false
	})
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: prometheus.NewRegistry()})

	dt.Produce(t, p.prod, sourceRecords(p, "ok", "transient", "bad")...)
	received(t, h.calls, "the batch")
	dt.Eventually(t, 20*time.Second, func() bool { return refused.Load() >= 2 && p.committed(t, p.cfg.Topics.Source, 0) == 1 },
		"the delivered record committed while the tier and dead-letter writes are refused")
	if got := p.committed(t, p.cfg.Topics.Source, 0); got != 1 {
		t.Fatalf("committed %d while the writes of offsets 1 and 2 are refused, want 1", got)
	}
	release.Store(true)
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 3 }, "the batch committed")
}
