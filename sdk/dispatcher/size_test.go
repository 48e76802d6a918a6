package dispatcher_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestSizeExcludesOwnHeaders: a record just under maxRecordBytes that fails once is retried and
// delivered: the dispatcher's own retryops.* headers do not count against the limit.
func TestSizeExcludesOwnHeaders(t *testing.T) {
	p := newPipeline(t, "size-own-headers", 1, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		if r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	})
	p.cfg.MaxRecordBytes = 1024
	start(t, dispatcher.Options{Config: p.cfg})
	rec := &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("k"), Value: []byte(strings.Repeat("v", 1000)),
		Headers: []kgo.RecordHeader{{Key: "user", Value: []byte("h")}}}
	dt.Produce(t, p.prod, rec)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the near-limit record delivered on its retry")
	if dl := allRecords(t, p, p.cfg.Topics.DeadLetter); len(dl) != 0 {
		r, _ := dt.Header(dl[0], headers.Reason)
		t.Errorf("the record was dead-lettered: %s", r)
	}
}
