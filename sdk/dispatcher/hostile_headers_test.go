package dispatcher_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestForgedOriginalTopic: retryops.original.topic is not a valid topic name (a CR LF in it). On a
// source record, written by any producer, the forged coordinates are ignored: the record is
// delivered once with its own coordinates (before, the value reached the HTTP request, which
// net/http refused to send: a connection failure on every attempt, counted against the sink's
// circuit breaker, then a dead letter). On a retry tier the record is dead-lettered as malformed.
func TestForgedOriginalTopic(t *testing.T) {
	p := newPipeline(t, "forged-original-topic", 1, simplePolicy(3, 30*time.Millisecond), nil) // a sink answering 200
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

// TestHugeSinkErrorType: a sink answering a non-retriable status with a 60 KiB Retryops-Error-Type
// does not stick its record's partition: the error type is cut on the records the dispatcher
// writes (before, the dead letter kept it whole, was too large even stripped to its retryops.*
// headers, and stayed stuck, its partition committing nothing past it).
func TestHugeSinkErrorType(t *testing.T) {
	huge := strings.Repeat("E", 60<<10) // within the sink's 64 KiB response header bound
	p := newPipeline(t, "huge-error-type", 1, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		if string(r.Body) == "hostile" {
			return dt.Response{Status: 400, ErrorType: huge}
		}
		return dt.Response{}
	})
	// The producer's batch limit stands in for the dead letter topic's max.message.bytes.
	start(t, dispatcher.Options{Config: p.cfg, KafkaOptions: []kgo.Opt{kgo.ProducerBatchMaxBytes(16 << 10)}})
	dl := p.onlyDeadLetter(t, &kgo.Record{Key: []byte("hostile"), Value: []byte("hostile")})
	et, _ := dt.Header(dl, headers.ErrorType)
	if string(dl.Value) != "hostile" || len(et) > headers.MaxErrorTypeBytes || !strings.HasPrefix(huge, et) || et == "" {
		t.Errorf("dead letter %q: value %q, error type of %d bytes", dl.Key, dl.Value, len(et))
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 2 }, "both offsets committed")
}

// TestManyTinyHeaders: a record of 100,000 empty headers (200 KB in Kafka, nothing of key or value)
// is too large at once: each header counts what its HTTP form (Kafka-Header-<name>: <value>) costs,
// so maxRecordBytes bounds the header count and the memory of building the sink's request (before,
// such headers counted 0 bytes and each delivery built a request of 1.7 MB of headers, some 30 MB
// allocated, up to maxInFlight at once).
func TestManyTinyHeaders(t *testing.T) {
	p := newPipeline(t, "many-tiny-headers", 1, simplePolicy(3, 30*time.Millisecond), nil)
	start(t, dispatcher.Options{Config: p.cfg})
	dl := p.onlyDeadLetter(t, &kgo.Record{Key: []byte("hostile"), Headers: make([]kgo.RecordHeader, 100000)})
	reason, _ := dt.Header(dl, headers.Reason)
	et, _ := dt.Header(dl, headers.ErrorType)
	msg, _ := dt.Header(dl, headers.ErrorMessage)
	if string(dl.Key) != "hostile" || reason != headers.ReasonUndeliverable || et != headers.ErrorTypeRecordTooLarge {
		t.Errorf("dead letter %q: reason %s, type %s, message %q; want %s, %s", dl.Key, reason, et, msg,
			headers.ReasonUndeliverable, headers.ErrorTypeRecordTooLarge)
	}
	if len(dl.Headers) < 100000 {
		t.Errorf("the dead letter kept %d headers", len(dl.Headers))
	}
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the record behind delivered")
	if n := p.sink.Count(); n != 1 {
		t.Errorf("sink requests: %d, want 1 (the record of 100,000 headers never sent)", n)
	}
}

// TestRedirectNotFollowed pins that the HTTP sink never follows a redirect: a sink answering 302
// to another host (which an http.Client would follow with a GET carrying the record's key and
// headers) is a failure like any non-2xx answer, and the other host never receives anything.
func TestRedirectNotFollowed(t *testing.T) {
	var other atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { other.Add(1) }))
	t.Cleanup(elsewhere.Close)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/stolen", http.StatusFound)
	}))
	t.Cleanup(redirect.Close)
	p := newPipeline(t, "redirect", 1, simplePolicy(3, 30*time.Millisecond), nil)
	p.cfg.Sink.URL = redirect.URL
	start(t, dispatcher.Options{Config: p.cfg})
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("secret"), Value: []byte("secret")})
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dl))
	}
	if s, _ := dt.Header(dl[0], headers.HTTPStatus); s != "302" {
		t.Errorf("dead letter %s = %q, want 302", headers.HTTPStatus, s)
	}
	if n := other.Load(); n != 0 {
		t.Errorf("the redirect was followed: the other host got %d requests", n)
	}
}
