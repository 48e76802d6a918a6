package dispatcher_test

import (
	"bufio"
	"context"
	"io"
	"maps"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// dropSecond is an HTTP/1.1 server that answers the first request of every connection with 204
// (keeping the connection) and, on the second request over a connection, reads it and closes the
// connection without answering. It counts the requests it read by Idempotency-Key.
type dropSecond struct {
	ln   net.Listener
	mu   sync.Mutex
	seen map[string]int
}

func newDropSecond(t *testing.T) *dropSecond {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &dropSecond{ln: ln, seen: map[string]int{}}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *dropSecond) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	for n := 1; ; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		s.mu.Lock()
		s.seen[req.Header.Get("Idempotency-Key")]++
		s.seen[req.Header.Get("Idempotency-Key")+"/"+req.Header.Get("Retry-Attempt")]++
		if req.ContentLength < 0 || len(req.TransferEncoding) > 0 {
			s.seen["unknown length"]++
		}
		s.mu.Unlock()
		if n == 2 {
			return // read, never answered
		}
		if _, err := io.WriteString(c, "HTTP/1.1 204 No Content\r\n\r\n"); err != nil {
			return
		}
	}
}

func (s *dropSecond) count(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key]
}

// TestHTTPSinkNoSilentResend: a request whose connection is closed after the server read it, with
// no answer, is not sent again by net/http (a POST with Idempotency-Key is "replayable" to it): the
// server sees it once and the sink reports a failed delivery, which the policy then retries. Both
// a record with a value and one without.
func TestHTTPSinkNoSilentResend(t *testing.T) {
	for _, value := range [][]byte{[]byte("payload"), nil} {
		srv := newDropSecond(t)
		sink := dispatcher.NewHTTPSink("http://"+srv.ln.Addr().String()+"/", 1)
		deliver := func(key string) dispatcher.Result {
			rec := &kgo.Record{Topic: "t", Value: value, Timestamp: time.Now()}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return sink.Deliver(ctx, &dispatcher.Delivery{Record: rec, Consumed: rec, Attempt: 1, IdempotencyKey: key})
		}
		if res := deliver("first"); !res.Success {
			t.Fatalf("value %q: first delivery failed: %+v", value, res)
		}
		res := deliver("second")
		if n := srv.count("second"); n != 1 {
			t.Errorf("value %q: the server read the second request %d times, want 1 (a silent re-send)", value, n)
		}
		if n := srv.count("unknown length"); n != 0 {
			t.Errorf("value %q: %d requests without a Content-Length", value, n)
		}
		if res.Success || res.Undeliverable || res.Outcome.Transport == retry.TransportNone {
			t.Errorf("value %q: second delivery %+v, want a transport failure", value, res)
		}
	}
}

// TestNoSilentResendRetried: in the dispatcher, the request dropped after being read is a failed
// delivery that the policy retries: the sink sees attempt 1 of that record once and attempt 2 once,
// and the failure is counted.
func TestNoSilentResendRetried(t *testing.T) {
	srv := newDropSecond(t)
	pol := simplePolicy(3, 30*time.Millisecond)
	pol.Classification.Rules = append(pol.Classification.Rules,
		policy.ClassificationRule{Name: "transport", Action: policy.ActionRetry, ErrorTypes: []string{"TimeoutError", "ConnectionError"}})
	p := newPipeline(t, "no-silent-resend", 1, pol, nil)
	p.cfg.Sink.URL = "http://" + srv.ln.Addr().String() + "/"
	p.cfg.Delivery.MaxInFlight = 1
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Registerer: reg})
	src := p.cfg.Topics.Source
	dt.Produce(t, p.prod, &kgo.Record{Topic: src, Value: []byte("a")})
	dt.Eventually(t, 20*time.Second, func() bool { return srv.count(headers.IdempotencyKey(src, 0, 0)) == 1 }, "the first record delivered")
	dt.Produce(t, p.prod, &kgo.Record{Topic: src, Value: []byte("b")})
	second := headers.IdempotencyKey(src, 0, 1)
	dt.Eventually(t, 20*time.Second, func() bool { return srv.count(second+"/2") == 1 }, "the dropped record retried by the policy: %v", srv.all())
	if n := srv.count(second + "/1"); n != 1 {
		t.Errorf("attempt 1 of the dropped record was read %d times, want 1", n)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 0) == 2 }, "both records committed")
	var failures float64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != metrics.DeliveryAttemptsTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelResult && l.GetValue() == metrics.ResultFailure {
					failures += m.GetCounter().GetValue()
				}
			}
		}
	}
	if failures != 1 {
		t.Errorf("failed deliveries counted: %v, want 1", failures)
	}
}

func (s *dropSecond) all() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.seen)
}
