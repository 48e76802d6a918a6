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
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// TestBatchPanicAfterARecordFinished: a panic while finishing a batch's second record (here the
// breaker's callback, as its failure opens the breaker) dead-letters that record only. The first
// record, already finished and waiting for its retry-tier write (held back until the panic), keeps
// that fate: it is not dead-lettered too, which would write it twice.
func TestBatchPanicAfterARecordFinished(t *testing.T) {
	pol := simplePolicy(3, time.Hour)
	pol.CircuitBreaker = &policy.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 2, Window: dt.PD(10 * time.Second),
		OpenDuration: dt.PD(time.Hour), HalfOpenRequests: 1, CloseSuccessPercent: 50}
	p := newPipeline(t, "batchpanic", 1, pol, nil)
	batchConfig(p, 2, 1<<20, 10*time.Second)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, func(*dispatcher.Delivery) (dispatcher.Result, bool) {
		return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}, true
	})
	var panicked atomic.Bool
	tier := p.cfg.Topics.Retries[0].Name
	tierID := topicID(t, p, tier)
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		for _, rt := range req.Topics {
			if (rt.Topic == tier || rt.TopicID == tierID) && !panicked.Load() {
				return rejectProduce(req, kerr.NotLeaderForPartition), nil, true
			}
		}
		return nil, nil, false
	})
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: prometheus.NewRegistry(),
		OnCircuitStateChange: func(_, to retry.State) {
			if to == retry.StateOpen && panicked.CompareAndSwap(false, true) {
				panic("breaker callback")
			}
		}})

	dt.Produce(t, p.prod, sourceRecords(p, "first", "second")...)
	received(t, h.calls, "the batch")
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 2 }, "the batch committed")
	tierRecs := allRecords(t, p, tier)
	dl := allRecords(t, p, p.cfg.Topics.DeadLetter)
	var got []string
	for _, r := range tierRecs {
		got = append(got, "tier:"+string(r.Value))
	}
	for _, r := range dl {
		et, _ := dt.Header(r, headers.ErrorType)
		got = append(got, "dlq:"+string(r.Value)+":"+et)
	}
	if len(got) != 2 || got[0] != "tier:first" || got[1] != "dlq:second:"+headers.ErrorTypePanic {
		t.Fatalf("written %v, want [tier:first dlq:second:%s]", got, headers.ErrorTypePanic)
	}
}
