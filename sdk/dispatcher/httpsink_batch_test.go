package dispatcher_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/retry"
)

var batchTS = time.Date(2031, 3, 4, 5, 6, 7, 891_000_000, time.UTC)

// batchDeliveries returns n deliveries of records on topic t, partition 2, offsets 10...
func batchDeliveries(n int) []*dispatcher.Delivery {
	ds := make([]*dispatcher.Delivery, n)
	for i := range ds {
		r := &kgo.Record{Topic: "t", Partition: 2, Offset: int64(10 + i), Timestamp: batchTS,
			Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i))}
		ds[i] = &dispatcher.Delivery{Record: r, Consumed: r, Attempt: 1, IdempotencyKey: fmt.Sprintf("t/2/%d", 10+i)}
	}
	return ds
}

// batchSink serves h and returns an HTTPSink POSTing to it.
func batchSink(t *testing.T, h http.HandlerFunc) *dispatcher.HTTPSink {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return dispatcher.NewHTTPSink(srv.URL, 4)
}

// answer is a sink's answer to one record: its status, error type, message and Retry-After.
type answer struct {
	status     int
	errorType  string
	message    string
	retryAfter int // seconds, 0 for none
}

// singleResult is what a single delivery gets from a sink answering a.
func singleResult(t *testing.T, a answer) dispatcher.Result {
	t.Helper()
	sink := batchSink(t, func(w http.ResponseWriter, _ *http.Request) {
		if a.errorType != "" {
			w.Header().Set("Retryops-Error-Type", a.errorType)
		}
		if a.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(a.retryAfter))
		}
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.message)
	})
	d := batchDeliveries(1)[0]
	return sink.Deliver(context.Background(), d)
}

// TestDeliverBatchRequest: one POST of the batch document, which a sink author's ParseRequest reads
// back with every field a single delivery sends in its headers; key, value and headers that are not
// UTF-8 survive as base64.
func TestDeliverBatchRequest(t *testing.T) {
	ds := batchDeliveries(3)
	ds[1].Record.Value = []byte{0xff, 0x00, 0x01}
	ds[1].Record.Key = nil
	ds[1].Record.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0xfe}}}
	ds[2].Attempt = 3
	ds[2].FirstFailure = batchTS.Add(-time.Minute)
	ds[2].ReplayOf, ds[2].ReplayCount = "dlq/0/5", 2
	retried := &kgo.Record{Topic: "t-retry-1", Offset: 99}
	ds[2].Consumed = retried
	var got *batch.Request
	var posts int
	sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
		posts++
		req, err := batch.ParseRequest(r, 1<<20)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got = req
		res := make([]batch.Result, len(req.Records))
		for i, rec := range req.Records {
			res[i] = batch.Success(rec.ID)
		}
		_ = batch.WriteResults(w, res)
	})
	results := sink.DeliverBatch(context.Background(), ds)
	if posts != 1 || got == nil {
		t.Fatalf("%d POSTs, request parsed: %v; want one POST of a valid document", posts, got != nil)
	}
	for i, res := range results {
		if !res.Success {
			t.Errorf("record %d: %+v, want success", i, res)
		}
	}
	if len(got.Records) != 3 {
		t.Fatalf("%d records in the request, want 3", len(got.Records))
	}
	for i, rec := range got.Records {
		d := ds[i]
		if !strings.HasSuffix(rec.ID, "."+strconv.Itoa(i)) || rec.IdempotencyKey != d.IdempotencyKey || rec.Attempt != d.Attempt ||
			rec.Topic != "t" || rec.Partition != 2 || rec.Offset != d.Record.Offset || !rec.Timestamp.Equal(batchTS) {
			t.Errorf("record %d: %+v, want the delivery's id, key, attempt and original coordinates", i, rec)
		}
		if string(rec.Key()) != string(d.Record.Key) || (rec.Key() == nil) != (d.Record.Key == nil) || string(rec.Value()) != string(d.Record.Value) {
			t.Errorf("record %d: key %q value %q, want %q %q", i, rec.Key(), rec.Value(), d.Record.Key, d.Record.Value)
		}
	}
	if h := got.Records[1].Headers; len(h) != 2 || h[0].Key != "trace" || string(h[0].Value) != "abc" || string(h[1].Value) != "\xfe" {
		t.Errorf("headers %+v, want the record's own", h)
	}
	r2 := got.Records[2]
	if r2.FirstFailure == nil || !r2.FirstFailure.Equal(ds[2].FirstFailure) || r2.ReplayOf != "dlq/0/5" || r2.ReplayCount != 2 {
		t.Errorf("record 2: firstFailure %v replayOf %q count %d, want the delivery's", r2.FirstFailure, r2.ReplayOf, r2.ReplayCount)
	}
	if got.Records[0].FirstFailure != nil || got.Records[0].ReplayOf != "" {
		t.Errorf("record 0: %+v, want no firstFailure nor replayOf on a first attempt", got.Records[0])
	}
}

// TestDeliverBatchRecordResults: each record's failure in the answer becomes the Result a single
// answer with that status, error type, message and Retry-After gives (413 and 415 undeliverable,
// the message defaulting to the status); a record the answer does not mention fails as a 502
// BatchResultMissing; only the records said to succeed succeed.
func TestDeliverBatchRecordResults(t *testing.T) {
	answers := []answer{
		{status: 503, errorType: "Throttled", message: "slow down", retryAfter: 30},
		{status: 500},
		{status: 413, errorType: "Whatever", message: "too big"},
		{status: 415},
		{status: 422, errorType: "ValidationError", message: "bad field"},
		{status: 429, retryAfter: 5},
		// A single delivery's message is the body's first 1 KiB: a pattern past it must not match.
		{status: 400, errorType: "Invalid", message: strings.Repeat("x", 2000) + " matched only past 1 KiB"},
	}
	results := []string{`{"id":"0","status":"success"}`}
	for i, a := range answers {
		r := fmt.Sprintf(`{"id":"%d","status":"failure","httpStatus":%d`, i+1, a.status)
		if a.errorType != "" {
			r += fmt.Sprintf(`,"errorType":%q`, a.errorType)
		}
		if a.message != "" {
			r += fmt.Sprintf(`,"message":%q`, a.message)
		}
		if a.retryAfter > 0 {
			r += fmt.Sprintf(`,"retryAfter":%d`, a.retryAfter)
		}
		results = append(results, r+"}")
	}
	// Record len(answers)+1 is not mentioned.
	body := `{"version":"retryops.dev/batch/v1","results":[` + strings.Join(results, ",") + `]}`
	sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", batch.MediaType)
		_, _ = io.WriteString(w, echoIDs(t, r, body))
	})
	got := sink.DeliverBatch(context.Background(), batchDeliveries(len(answers)+2))
	if len(got) != len(answers)+2 {
		t.Fatalf("%d results, want %d", len(got), len(answers)+2)
	}
	if !got[0].Success {
		t.Errorf("record 0: %+v, want success", got[0])
	}
	for i, a := range answers {
		want := singleResult(t, a)
		if !reflect.DeepEqual(got[i+1], want) {
			t.Errorf("record %d answered %+v: %+v, want what a single delivery gets: %+v", i+1, a, got[i+1], want)
		}
	}
	missing := got[len(answers)+1]
	if missing.Success || missing.Undeliverable || missing.Outcome.HTTPStatus != http.StatusBadGateway ||
		missing.Outcome.ErrorType != batch.ErrorTypeResultMissing {
		t.Errorf("unmentioned record: %+v, want a 502 %s failure", missing, batch.ErrorTypeResultMissing)
	}
}

// TestDeliverBatchWholeAnswer: a non-2xx answer to the batch gives every record what a single
// delivery gets from it; but a 415 (the batch document's media type) says nothing of a record
// alone: every record is retried as BatchNotSupported, whatever the policy says of a 4xx.
func TestDeliverBatchWholeAnswer(t *testing.T) {
	cases := []struct {
		a             answer
		n             int
		undeliverable bool
		notSupported  bool
	}{
		{a: answer{status: 503, errorType: "Throttled", message: "busy", retryAfter: 12}, n: 3},
		{a: answer{status: 400, message: "bad"}, n: 2},
		{a: answer{status: 413}, n: 1, undeliverable: true},
		{a: answer{status: 413}, n: 3, undeliverable: true}, // split down to records alone, each refused
		{a: answer{status: 415}, n: 2, notSupported: true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d of %d", c.a.status, c.n), func(t *testing.T) {
			sink := batchSink(t, func(w http.ResponseWriter, _ *http.Request) {
				if c.a.errorType != "" {
					w.Header().Set("Retryops-Error-Type", c.a.errorType)
				}
				if c.a.retryAfter > 0 {
					w.Header().Set("Retry-After", strconv.Itoa(c.a.retryAfter))
				}
				w.WriteHeader(c.a.status)
				_, _ = io.WriteString(w, c.a.message)
			})
			want := singleResult(t, c.a)
			if !c.undeliverable {
				want.Undeliverable = false
				want.Outcome.ErrorType = c.a.errorType
			}
			if c.notSupported {
				want.Outcome.ErrorType = batch.ErrorTypeNotSupported
				want.Force = retry.ActionRetry
			}
			got := sink.DeliverBatch(context.Background(), batchDeliveries(c.n))
			if len(got) != c.n {
				t.Fatalf("%d results, want %d", len(got), c.n)
			}
			for i, res := range got {
				if !reflect.DeepEqual(res, want) {
					t.Errorf("record %d: %+v, want %+v", i, res, want)
				}
			}
		})
	}
}
