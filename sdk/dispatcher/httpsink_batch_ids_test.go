package dispatcher_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/sdk/batch"
)

// TestDeliverBatchStaleAnswer: a sink (or a proxy in front of it) that answers a request with the
// answer to an earlier one, every record a success, acknowledges none of the second request's
// records: its ids are not the earlier request's, so its records fail as BatchResultMissing.
func TestDeliverBatchStaleAnswer(t *testing.T) {
	var mu sync.Mutex
	var first []batch.Result
	seen := map[string]bool{}
	sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
		req, err := batch.ParseRequest(r, 1<<20)
		if err != nil {
			t.Errorf("ParseRequest: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range req.Records {
			if id := req.Records[i].ID; seen[id] {
				t.Errorf("id %q sent again in another request", id)
			} else {
				seen[id] = true
			}
		}
		if first == nil {
			for i := range req.Records {
				first = append(first, batch.Success(req.Records[i].ID))
			}
			_ = batch.WriteResults(w, []batch.Result{}) // nothing processed
			return
		}
		_ = batch.WriteResults(w, first)
	})
	for n, want := range []bool{false, false} {
		got := sink.DeliverBatch(context.Background(), batchDeliveries(3))
		for i, r := range got {
			if r.Success != want || (!r.Success && r.Outcome.ErrorType != batch.ErrorTypeResultMissing) {
				t.Errorf("request %d record %d: %+v, want a %s failure", n, i, r, batch.ErrorTypeResultMissing)
			}
		}
	}
}

// echoIDs rewrites body's ids "0", "1", ... as the ids of r's records in that order: a fixed answer
// made to address a request's records.
func echoIDs(t *testing.T, r *http.Request, body string) string {
	t.Helper()
	req, err := batch.ParseRequest(r, 1<<20)
	if err != nil {
		t.Errorf("ParseRequest: %v", err)
		return body
	}
	for i := len(req.Records) - 1; i >= 0; i-- {
		body = strings.ReplaceAll(body, `"id":"`+strconv.Itoa(i)+`"`, `"id":`+strconv.Quote(req.Records[i].ID))
	}
	return body
}
