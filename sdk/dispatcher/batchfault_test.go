package dispatcher_test

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestRetryBatchTooLargeSparesItsOtherRecords: the broker rejects a whole batch written to a retry
// tier as too large (here every batch of more than one record). The records of that batch are
// written again one at a time, so none is dead-lettered for another's size: all are retried and
// delivered ("a batch-level retry-tier produce error dead-letters innocent records").
func TestRetryBatchTooLargeSparesItsOtherRecords(t *testing.T) {
	const n = 40
	p := newPipeline(t, "batch-fault", 1, simplePolicy(3, 50*time.Millisecond), func(r *dt.Request) dt.Response {
		if r.Attempt == 1 {
			return dt.Response{Status: 503, Delay: 2 * time.Millisecond}
		}
		return dt.Response{}
	})
	p.cfg.Delivery.Ordering = "Unordered"
	p.cfg.Delivery.MaxInFlight = 40
	tier := p.cfg.Topics.Retries[0].Name
	tierID := topicID(t, p, tier)
	var rejected atomic.Int32
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		multi := false
		for _, rt := range req.Topics {
			if rt.Topic != tier && rt.TopicID != tierID {
				continue
			}
			for _, rp := range rt.Partitions {
				var b kmsg.RecordBatch
				if b.ReadFrom(rp.Records) == nil && b.NumRecords > 1 {
					multi = true
				}
			}
		}
		if !multi {
			return nil, nil, false
		}
		rejected.Add(1)
		return rejectProduce(req, kerr.MessageTooLarge), nil, true
	})
	start(t, dispatcher.Options{Config: p.cfg})
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)
	p.sink.WaitFor(t, 30*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == n
	}, "every record delivered on its retry")
	t.Logf("batches of the retry tier rejected as too large: %d", rejected.Load())
	if rejected.Load() == 0 {
		t.Fatal("no batch of more than one record reached the retry tier: the test proves nothing")
	}
	if dl := allRecords(t, p, p.cfg.Topics.DeadLetter); len(dl) != 0 {
		et, _ := dt.Header(dl[0], headers.ErrorType)
		t.Errorf("record %s dead-lettered (%s): a batch's rejection must not dead-letter its records", dl[0].Value, et)
	}
}
