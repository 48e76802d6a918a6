package dispatcher_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/dispatcher"
)

// TestDeliverBatch413Splits: a sink refusing a request of more than two records with 413 (its body
// limit) processed none of them, so the batch is sent again in halves, in order, down to records
// alone: each record gets what it gets alone (here delivered, or its own 503), never the batch's
// 413, which a policy dead-letters like any 4xx.
func TestDeliverBatch413Splits(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	sink := batchSink(t, func(w http.ResponseWriter, r *http.Request) {
		req, err := batch.ParseRequest(r, 1<<20)
		if err != nil {
			t.Errorf("ParseRequest: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var vals []string
		for i := range req.Records {
			vals = append(vals, string(req.Records[i].Value()))
		}
		mu.Lock()
		sent = append(sent, strings.Join(vals, "+"))
		mu.Unlock()
		if len(req.Records) > 2 {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
		var res []batch.Result
		for i := range req.Records {
			rec := &req.Records[i]
			if string(rec.Value()) == "v1" {
				res = append(res, batch.Failure(rec.ID, 503, "Busy", "busy"))
				continue
			}
			res = append(res, batch.Success(rec.ID))
		}
		_ = batch.WriteResults(w, res)
	})
	got := sink.DeliverBatch(context.Background(), batchDeliveries(5))
	if len(got) != 5 {
		t.Fatalf("%d results, want 5", len(got))
	}
	for i, r := range got {
		if r.Success != (i != 1) {
			t.Errorf("record %d: %+v, want success %v", i, r, i != 1)
		}
	}
	if got[1].Outcome.HTTPStatus != 503 || got[1].Outcome.ErrorType != "Busy" {
		t.Errorf("record 1: %+v, want its own 503 Busy", got[1])
	}
	want := "v0+v1+v2+v3+v4,v0+v1,v2+v3+v4,v2,v3+v4"
	if s := strings.Join(sent, ","); s != want {
		t.Errorf("requests %s, want %s", s, want)
	}
}

var _ dispatcher.BatchHandler = (*dispatcher.HTTPSink)(nil)
