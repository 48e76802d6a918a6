package dispatcher_test

import (
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/internal/dispatcher"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
)

// TestForgedOriginalTopic: retryops.original.topic is not a valid topic name (a CR LF in it). On a
// source record, written by any producer, the forged coordinates are ignored: the record is
// delivered once with its own coordinates (before, the value reached the HTTP request, which
// net/http refused to send: a connection failure on every attempt, counted against the sink's
// circuit breaker, then a dead letter). On a retry tier the record is dead-lettered as malformed.
func TestForgedOriginalTopic(t *testing.T) {
	p := newPipeline(t, "forged-original-topic", 1, simplePolicy(3, 30*time.Millisecond), func(*dt.Request) dt.Response {
		return dt.Response{}
	})
	start(t, dispatcher.Options{Config: p.cfg})
	evil := "evil\r\nX-Injected: 1"
	forged := tierRecord(p, "forged", "77", "1", time.Now())
	forged.Topic = p.cfg.Topics.Source
	forged.Headers[0].Value = []byte(evil)
	hostile := tierRecord(p, "hostile", "500", "1", time.Now())
	hostile.Headers[0].Value = []byte(evil)
	dt.Produce(t, p.prod, forged, hostile)
	checkMalformed(t, p, headers.OriginalTopic)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the source record with forged coordinates delivered")
	rs := p.sink.Requests()
	if len(rs) != 1 || rs[0].Header.Get(headers.HTTPKafkaTopic) != p.cfg.Topics.Source || rs[0].Header.Get("X-Injected") != "" {
		t.Fatalf("deliveries: %d, first %+v", len(rs), rs[0].Header)
	}
	if !strings.HasPrefix(rs[0].Key, p.cfg.Topics.Source+"/0/") {
		t.Errorf("Idempotency-Key %q, want the source record's coordinates", rs[0].Key)
	}
}
