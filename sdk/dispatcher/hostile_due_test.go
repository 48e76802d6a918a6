package dispatcher_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestHostileDue: a retry-tier record due in year 9999 at the head of a tier partition is
// dead-lettered as malformed at once, and the retry record behind it is delivered when due.
func TestHostileDue(t *testing.T) {
	p := newPipeline(t, "hostile-due", 1, simplePolicy(3, 30*time.Millisecond), func(*dt.Request) dt.Response {
		return dt.Response{}
	})
	start(t, dispatcher.Options{Config: p.cfg})
	dt.Produce(t, p.prod,
		tierRecord(p, "hostile", "500", "1", time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)),
		tierRecord(p, "behind", "501", "1", time.Now().Add(20*time.Millisecond)))
	checkMalformed(t, p, headers.Due)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the record behind the hostile one delivered")
	rs := p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 501))
	if len(rs) != 1 || rs[0].Attempt != 2 {
		t.Fatalf("deliveries of the record behind: %+v", rs)
	}
}

// TestNegativeTimestamp: a record with timestamp -1 (old producers) starts its deadline when it is
// first seen, not in 1969: it is delivered, not dead-lettered as past its deadline.
func TestNegativeTimestamp(t *testing.T) {
	pol := simplePolicy(3, 30*time.Millisecond)
	pol.Deadline = dt.PD(time.Hour)
	p := newPipeline(t, "negative-timestamp", 1, pol, func(*dt.Request) dt.Response { return dt.Response{} })
	start(t, dispatcher.Options{Config: p.cfg})
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("old"), Value: []byte("old"), Timestamp: time.UnixMilli(-1)})
	p.sink.WaitFor(t, 10*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the record with timestamp -1 delivered")
}
