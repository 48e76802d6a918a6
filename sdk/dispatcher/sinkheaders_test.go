package dispatcher_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/retry"
)

// TestSinkResponseHeadersAreBounded: a sink answering with 1 MiB of headers (net/http's default
// allows 10 MiB per response, so maxInFlight deliveries could hold hundreds of MiB) gets a transport
// failure, which the policy classifies, instead of its headers being read.
func TestSinkResponseHeadersAreBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for i := range 16 {
			w.Header().Set("X-Padding-"+string(rune('a'+i)), strings.Repeat("x", 64<<10))
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	sink := dispatcher.NewHTTPSink(srv.URL, 1)
	rec := &kgo.Record{Topic: "t", Value: []byte("v"), Timestamp: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := sink.Deliver(ctx, &dispatcher.Delivery{Record: rec, Consumed: rec, Attempt: 1, IdempotencyKey: "k"})
	if res.Success || res.Outcome.Transport == retry.TransportNone || !strings.Contains(res.Outcome.Message, "header") {
		t.Fatalf("a 1 MiB response header block: %+v (HTTP status %d), want a transport failure naming the headers", res.Outcome, res.Outcome.HTTPStatus)
	}
	t.Logf("transport %s: %s", res.Outcome.Transport, res.Outcome.Message)
}

// TestRetryAfterDateCountsFromTheSinkClock: a Retry-After given as an HTTP date is a wait from the
// sink's clock, not the wall clock: with a fake clock ten seconds before the date, the wait is ten
// seconds, and after the clock is stepped past the date there is none.
func TestRetryAfterDateCountsFromTheSinkClock(t *testing.T) {
	now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	fake := clocktesting.NewFakePassiveClock(now)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", now.Add(10*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	sink := dispatcher.NewHTTPSink(srv.URL, 1, dispatcher.WithSinkClock(fake))
	rec := &kgo.Record{Topic: "t", Value: []byte("v"), Timestamp: now}
	deliver := func() time.Duration {
		res := sink.Deliver(context.Background(), &dispatcher.Delivery{Record: rec, Consumed: rec, Attempt: 1, IdempotencyKey: "k"})
		if res.Outcome.HTTPStatus != http.StatusServiceUnavailable {
			t.Fatalf("outcome %+v, want HTTP 503", res.Outcome)
		}
		return res.Outcome.RetryAfter
	}
	if got := deliver(); got != 10*time.Second {
		t.Errorf("Retry-After 10 s after the sink clock's now: wait %v, want 10s", got)
	}
	fake.SetTime(now.Add(11 * time.Second))
	if got := deliver(); got != 0 {
		t.Errorf("Retry-After a second before the sink clock's now: wait %v, want 0", got)
	}
}
