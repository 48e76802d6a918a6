package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/sdk/batch"
)

// TestDemoHasABatchedPipeline: the demo's batched pipeline, as `make dev` applies it (every field
// known to the API types), reads chat's source with a group of its own, delivers in batches to the
// batch sink, and has room for a batch per source partition in flight.
func TestDemoHasABatchedPipeline(t *testing.T) {
	objs := renderDemo(t)
	u := objs["ConsumerPipeline/batched"]
	if u == nil {
		t.Fatal("no ConsumerPipeline batched in the demo")
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	p := &retryv1alpha1.ConsumerPipeline{}
	if err := yaml.UnmarshalStrict(raw, p); err != nil {
		t.Fatalf("the batched pipeline does not decode strictly: %v", err)
	}
	d := p.Spec.Delivery
	if d == nil || d.Batch == nil {
		t.Fatalf("batched has no spec.delivery.batch: %+v", d)
	}
	if d.Batch.MaxRecords == nil || d.MaxInFlight == nil || *d.MaxInFlight < 3**d.Batch.MaxRecords {
		t.Errorf("maxInFlight %v, maxRecords %v: fewer records in flight than a batch per partition of chat's source", d.MaxInFlight, d.Batch.MaxRecords)
	}
	if p.Spec.Source.Topic != demoTopic || p.Spec.Source.ConsumerGroup != "" || p.Spec.Source.Create != nil {
		t.Errorf("source %+v, want chat's topic, the default group, no create", p.Spec.Source)
	}
	if p.Spec.Sink == nil || p.Spec.Sink.URI != "http://127.0.0.1:1/batched" || p.Spec.DeadLetterQueueRef.Name != "chatbot-dlq" {
		t.Errorf("sink %+v, queue %q", p.Spec.Sink, p.Spec.DeadLetterQueueRef.Name)
	}
	if objs["RetryPolicy/batched"] == nil {
		t.Error("no RetryPolicy batched in the demo")
	}
}

// TestBatchSink: the batch sink answers a result per record of a batch: demo-25 refused for good,
// demo-2 failing on its first attempt and accepted on its second, the others accepted; the live
// view counts requests, the records in them and the records delivered; a request that is not a batch
// document is refused with the status sdk/batch gives.
func TestBatchSink(t *testing.T) {
	s := &batchSink{}
	post := func(attempt int32, keys ...string) map[string]batch.Result {
		t.Helper()
		recs := make([]batch.Record, len(keys))
		ids := make([]string, len(keys))
		for i, k := range keys {
			ids[i] = "r" + k
			recs[i] = batch.Record{ID: ids[i], IdempotencyKey: "src/0/" + k, Attempt: attempt, Topic: "src",
				Timestamp: time.Unix(0, 0), RawKey: batch.Bytes(k), RawValue: batch.Bytes(`{"task":"demo"}`)}
		}
		var body bytes.Buffer
		if err := batch.EncodeRequest(&body, recs); err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/batched", &body)
		req.Header.Set("Content-Type", batch.MediaType)
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		res, err := batch.ParseResponse(rec.Body, ids, batch.ResponseLimit(len(ids)))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	status := func(r batch.Result) string {
		if r.Status == batch.StatusSuccess {
			return "success"
		}
		return string(r.Status) + " " + http.StatusText(r.HTTPStatus)
	}
	first := post(1, devenv.DemoKey(1), devenv.DemoKey(2), devenv.DemoKey(25))
	second := post(2, devenv.DemoKey(2), devenv.DemoKey(25))
	for _, c := range []struct{ got, want string }{
		{status(first["r"+devenv.DemoKey(1)]), "success"},
		{status(first["r"+devenv.DemoKey(2)]), "failure Service Unavailable"},
		{status(first["r"+devenv.DemoKey(25)]), "failure Unprocessable Entity"},
		{status(second["r"+devenv.DemoKey(2)]), "success"},
		{status(second["r"+devenv.DemoKey(25)]), "failure Unprocessable Entity"},
		{s.line(), "batched (spec.delivery.batch): 2 requests carrying 5 records (2.5 a request), 2 records delivered"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}

	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/batched", bytes.NewBufferString("{}")))
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Errorf("a request without the batch media type: %d, want 415", rec.Code)
	}
}
