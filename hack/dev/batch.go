package main

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/retryops/retry-operator/sdk/batch"
)

// batchedManifest is the demo's batch pipeline on chat's source (the topic and the sink's address):
// its own group, policy and tiers, chat's queue, and spec.delivery.batch. maxInFlight counts
// records: 300 lets each of the source's 3 partitions have a batch of up to 100 in flight.
// maxWait 1s lets a batch gather the demo producer's records of a second.
const batchedManifest = `# Written by make dev (hack/dev): a pipeline delivering in batches, a result per record.
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: batched}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 5s, multiplier: "2", maxDelay: 30s}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["429", "500-599"]}
  attemptTimeout: 10s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: batched}
spec:
  source: {topic: %s}
  retryPolicyRef: {name: batched}
  deadLetterQueueRef: {name: chatbot-dlq}
  delivery:
    maxInFlight: 300
    batch: {maxRecords: 100, maxWait: 1s}
  sink: {uri: "http://%s/batched"}
  replicas: 1
`

// batchSink is the batch pipeline's sink: it parses each batch (sdk/batch) and answers a result per
// record: 4% of records refused for good (422), 20% failing once (503), the others accepted.
type batchSink struct {
	mu        sync.Mutex
	requests  int
	records   int
	delivered map[string]bool
}

// batchSinkLimit bounds a request's body: 100 records of the demo's size, with room to spare.
const batchSinkLimit = 8 << 20

func (s *batchSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := batch.ParseRequest(r, batchSinkLimit)
	if err != nil {
		var e *batch.Error
		if !errors.As(err, &e) {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.Error(w, err.Error(), e.StatusCode())
		return
	}
	results := make([]batch.Result, len(req.Records))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delivered == nil {
		s.delivered = map[string]bool{}
	}
	s.requests++
	s.records += len(req.Records)
	for i := range req.Records {
		rec := &req.Records[i]
		n, err := strconv.Atoi(strings.TrimPrefix(string(rec.Key()), "demo-"))
		switch {
		case err == nil && n%25 == 0:
			results[i] = batch.Failure(rec.ID, http.StatusUnprocessableEntity, "", "demo: this record is refused for good")
		case err == nil && n%5 == 2 && rec.Attempt == 1:
			results[i] = batch.Failure(rec.ID, http.StatusServiceUnavailable, "", "demo: try again later")
		default:
			s.delivered[rec.IdempotencyKey] = true
			results[i] = batch.Success(rec.ID)
		}
	}
	_ = batch.WriteResults(w, results)
}

// line is the live view's line for the batch sink: batches against records.
func (s *batchSink) line() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	per := "-"
	if s.requests > 0 {
		per = strconv.FormatFloat(float64(s.records)/float64(s.requests), 'f', 1, 64)
	}
	return fmt.Sprintf("batched (spec.delivery.batch): %d requests carrying %d records (%s a request), %d records delivered",
		s.requests, s.records, per, len(s.delivered))
}
