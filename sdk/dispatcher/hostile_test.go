package dispatcher_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// tierRecord is a well-formed retry-tier record for original offset off, with the given attempts
// and due headers.
func tierRecord(p *pipeline, key string, off, attempts string, due time.Time) *kgo.Record {
	return &kgo.Record{Topic: p.cfg.Topics.Retries[0].Name, Key: []byte(key), Value: []byte(key), Headers: []kgo.RecordHeader{
		{Key: headers.OriginalTopic, Value: []byte(p.cfg.Topics.Source)},
		{Key: headers.OriginalPartition, Value: []byte("0")},
		{Key: headers.OriginalOffset, Value: []byte(off)},
		{Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(time.Now()))},
		{Key: headers.Attempts, Value: []byte(attempts)},
		{Key: headers.Due, Value: []byte(headers.FormatTime(due))},
		{Key: headers.Pipeline, Value: []byte(p.cfg.PipelineID())},
	}}
}

// checkMalformed reads one dead letter and checks it is the hostile record, dead-lettered as
// malformed with a message naming the header.
func checkMalformed(t *testing.T, p *pipeline, header string) {
	t.Helper()
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dl))
	}
	reason, _ := dt.Header(dl[0], headers.Reason)
	msg, _ := dt.Header(dl[0], headers.ErrorMessage)
	t.Logf("dead letter %q: reason %s, message %q", dl[0].Key, reason, msg)
	if string(dl[0].Key) != "hostile" || reason != headers.ReasonMalformed || !strings.Contains(msg, header) {
		t.Errorf("dead letter %q: reason %s, message %q; want hostile, %s, naming %s", dl[0].Key, reason, msg, headers.ReasonMalformed, header)
	}
}

// TestHostileAttempts: a retry-tier record claiming 2147483647 attempts, which the sink fails, is
// dead-lettered as malformed at once; the dispatcher does not crash and the record behind it in
// the same tier partition is delivered.
func TestHostileAttempts(t *testing.T) {
	p := newPipeline(t, "hostile-attempts", 1, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		if string(r.Body) == "hostile" {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	})
	start(t, dispatcher.Options{Config: p.cfg})
	dt.Produce(t, p.prod,
		tierRecord(p, "hostile", "500", "2147483647", time.Now()),
		tierRecord(p, "behind", "501", "1", time.Now()))
	checkMalformed(t, p, headers.Attempts)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the record behind the hostile one delivered")
	if n := len(p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 500))); n != 0 {
		t.Errorf("the hostile record was delivered %d times", n)
	}
}

// TestHandlerPanic: a handler that panics on one record does not crash the dispatcher: the record
// is dead-lettered (undeliverable, error type Panic), the panic is counted, and the records behind
// it are delivered.
func TestHandlerPanic(t *testing.T) {
	p := newPipeline(t, "handler-panic", 1, simplePolicy(3, 30*time.Millisecond), nil)
	reg := prometheus.NewRegistry()
	var mu sync.Mutex
	delivered := 0
	h := dispatcher.HandlerFunc(func(_ context.Context, d *dispatcher.Delivery) dispatcher.Result {
		if string(d.Record.Value) == "boom" {
			panic("boom")
		}
		mu.Lock()
		delivered++
		mu.Unlock()
		return dispatcher.Result{Success: true}
	})
	start(t, dispatcher.Options{Config: p.cfg, Registerer: reg, Handler: h})
	dl := p.onlyDeadLetter(t, &kgo.Record{Key: []byte("hostile"), Value: []byte("boom")})
	reason, _ := dt.Header(dl, headers.Reason)
	et, _ := dt.Header(dl, headers.ErrorType)
	msg, _ := dt.Header(dl, headers.ErrorMessage)
	if reason != headers.ReasonUndeliverable || et != headers.ErrorTypePanic || !strings.Contains(msg, "boom") {
		t.Errorf("dead letter: reason %s, type %s, message %q", reason, et, msg)
	}
	dt.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return delivered == 1
	}, "the record behind the panic delivered")
	var n float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == metrics.PanicsTotal {
			n = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if n != 1 {
		t.Errorf("%s = %v, want 1", metrics.PanicsTotal, n)
	}
}
