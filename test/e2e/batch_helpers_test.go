package e2e

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	btNS      = "batch"
	btRecords = 5000
	// btMaxAttempts and the backoff below are btManifests' policy: 100ms, 200ms, 400ms, no jitter.
	btMaxAttempts = 4
	btWait        = time.Second
)

// btDelay is the policy's backoff delay after failed attempt a (1-based).
func btDelay(a int) time.Duration {
	return min(100*time.Millisecond<<(a-1), time.Second)
}

// btKind is what the sink does with a record, by its key.
type btKind int

const (
	btOK            btKind = iota // accepted at once
	btPermanent                   // refused for good (422)
	btTransient1                  // 500 once, then accepted
	btTransient2                  // 500 twice, then accepted
	btRetryAfter                  // 503 with Retry-After once, then accepted
	btMissing1                    // left out of the answer once (alone: 502), then accepted
	btMissingAlways               // always left out (alone: 502)
	btFailAlways                  // always 500
)

func (k btKind) String() string {
	return [...]string{"ok", "permanent", "transient1", "transient2", "retryAfter", "missing1", "missingAlways", "failAlways"}[k]
}

func btKindOf(n int) btKind {
	switch n % 20 {
	case 0:
		return btPermanent
	case 1, 2:
		return btTransient1
	case 3:
		return btTransient2
	case 4:
		return btRetryAfter
	case 5:
		return btMissing1
	case 6:
		return btMissingAlways
	case 7:
		return btFailAlways
	default:
		return btOK
	}
}

func btKey(n int) string { return "b-" + strconv.Itoa(n) }

// btFate is the fate alone of a record of kind k under the policy: "delivered@<attempt>" or
// "dead:<reason>@<attempt>".
func btFate(k btKind) string {
	switch k {
	case btOK:
		return "delivered@1"
	case btPermanent:
		return "dead:" + headers.ReasonNonRetriable + "@1"
	case btTransient1, btRetryAfter, btMissing1:
		return "delivered@2"
	case btTransient2:
		return "delivered@3"
	default:
		return fmt.Sprintf("dead:%s@%d", headers.ReasonMaxRetriesExceeded, btMaxAttempts)
	}
}

// btAnswer is the answer to a record of kind k at its own attempt a: an HTTP status (0: left out
// of a batch's answer, 502 alone) and a Retry-After.
func btAnswer(k btKind, a int) (status int, retryAfter time.Duration) {
	switch {
	case k == btPermanent:
		return http.StatusUnprocessableEntity, 0
	case k == btTransient1 && a == 1, k == btTransient2 && a <= 2, k == btFailAlways:
		return http.StatusInternalServerError, 0
	case k == btRetryAfter && a == 1:
		return http.StatusServiceUnavailable, btWait
	case k == btMissing1 && a == 1, k == btMissingAlways:
		return 0, 0
	default:
		return http.StatusOK, 0
	}
}

// btCall is one delivery of a record the sink received.
type btCall struct {
	attempt int
	at      time.Time
	// status is the record's answer: its own, 0 when left out, or the whole batch's 503.
	status     int
	retryAfter time.Duration
	whole      bool
}

// btSink answers a pipeline's deliveries by key and own attempt: the delivery attempt less the
// whole-batch failures the record has been through, so that a record gets the answers it would get
// alone and a whole-batch failure costs it one attempt, as a 503 alone would.
type btSink struct {
	batched bool
	mu      sync.Mutex
	calls   map[string][]btCall
	wholes  map[string]int
	// requests and wholeFailed count the requests and the batches answered 503 whole.
	requests, wholeFailed int
	sizes                 []int
	errs                  []string
	// next is, per source partition, the offset after the last first attempt: Ordered mode
	// delivers a partition's first attempts in offset order, within and across batches.
	next map[int32]int64
}

// firstAttempt checks that a first attempt of partition p at offset o follows the previous one.
func (s *btSink) firstAttempt(p int32, o int64) {
	if o < s.next[p] {
		s.errs = append(s.errs, fmt.Sprintf("partition %d: offset %d delivered after offset %d", p, o, s.next[p]-1))
	}
	s.next[p] = o + 1
}

func newBTSink(batched bool) *btSink {
	return &btSink{batched: batched, calls: map[string][]btCall{}, wholes: map[string]int{}, next: map[int32]int64{}}
}

func (s *btSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	if !s.batched {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get(headers.HTTPKafkaKey)
		attempt, _ := strconv.Atoi(r.Header.Get(headers.HTTPRetryAttempt))
		n, err := strconv.Atoi(strings.TrimPrefix(key, "b-"))
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests++
		if err != nil || r.Header.Get("Content-Type") == batch.MediaType {
			s.errs = append(s.errs, fmt.Sprintf("unexpected request: key %q, Content-Type %q", key, r.Header.Get("Content-Type")))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if attempt == 1 {
			p, _ := strconv.ParseInt(r.Header.Get(headers.HTTPKafkaPartition), 10, 32)
			o, _ := strconv.ParseInt(r.Header.Get(headers.HTTPKafkaOffset), 10, 64)
			s.firstAttempt(int32(p), o)
		}
		status, ra := btAnswer(btKindOf(n), attempt)
		if status == 0 {
			status = http.StatusBadGateway
		}
		s.calls[key] = append(s.calls[key], btCall{attempt: attempt, at: now, status: status, retryAfter: ra})
		if ra > 0 {
			w.Header().Set(headers.HTTPRetryAfter, strconv.Itoa(int(ra/time.Second)))
		}
		w.WriteHeader(status)
		return
	}
	req, err := batch.ParseRequest(r, 16<<20)
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err.Error())
		s.mu.Unlock()
		var e *batch.Error
		errors.As(err, &e)
		http.Error(w, err.Error(), e.StatusCode())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	s.sizes = append(s.sizes, len(req.Records))
	// Every 7th batch whose records have not been through a whole failure yet is answered 503 whole:
	// at most one per record, so every fate fits in the policy's attempts.
	whole := s.requests%7 == 3
	for _, rec := range req.Records {
		if s.wholes[string(rec.Key())] > 0 {
			whole = false
		}
	}
	results := make([]batch.Result, 0, len(req.Records))
	for _, rec := range req.Records {
		key := string(rec.Key())
		n, err := strconv.Atoi(strings.TrimPrefix(key, "b-"))
		if err != nil {
			s.errs = append(s.errs, fmt.Sprintf("unexpected key %q", key))
			continue
		}
		if rec.Attempt == 1 {
			s.firstAttempt(rec.Partition, rec.Offset)
		}
		if whole {
			s.wholes[key]++
			s.calls[key] = append(s.calls[key], btCall{attempt: int(rec.Attempt), at: now, status: http.StatusServiceUnavailable, whole: true})
			continue
		}
		status, ra := btAnswer(btKindOf(n), int(rec.Attempt)-s.wholes[key])
		s.calls[key] = append(s.calls[key], btCall{attempt: int(rec.Attempt), at: now, status: status, retryAfter: ra})
		switch {
		case status == 0:
		case status < 300:
			results = append(results, batch.Success(rec.ID))
		default:
			res := batch.Failure(rec.ID, status, "HTTP"+strconv.Itoa(status), "by the fate table")
			res.RetryAfter = ra
			results = append(results, res)
		}
	}
	if whole {
		s.wholeFailed++
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	_ = batch.WriteResults(w, results)
}

func (s *btSink) snapshot() map[string][]btCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]btCall, len(s.calls))
	for k, v := range s.calls {
		out[k] = append([]btCall(nil), v...)
	}
	return out
}

// delivered counts the records answered a success.
func (s *btSink) delivered() int {
	n := 0
	for _, cs := range s.snapshot() {
		for _, c := range cs {
			if c.status == http.StatusOK {
				n++
				break
			}
		}
	}
	return n
}

// wholeOf is how many whole-batch failures key has been through.
func (s *btSink) wholeOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wholes[key]
}

// btManifests: one policy, and per pipeline its source and its own queue; only "batched" batches.
func btManifests(batchedURL, singleURL string) string {
	var b strings.Builder
	b.WriteString(`apiVersion: v1
kind: Namespace
metadata: {name: ` + btNS + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: bt, namespace: ` + btNS + `}
spec:
  maxAttempts: ` + strconv.Itoa(btMaxAttempts) + `
  backoff: {initialDelay: 100ms, multiplier: "2", maxDelay: 1s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: server-errors, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 5s
`)
	for _, p := range [][3]string{{"batched", batchedURL, "\n    maxInFlight: 300\n    batch: {maxRecords: 100}"}, {"single", singleURL, ""}} {
		b.WriteString(`---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: ` + p[0] + `-dlq, namespace: ` + btNS + `}
spec:
  topic: {name: bt-` + p[0] + `.dlq, partitions: 3}
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: ` + p[0] + `, namespace: ` + btNS + `}
spec:
  source: {topic: bt-` + p[0] + `, create: {partitions: 3}}
  retryPolicyRef: {name: bt}
  deadLetterQueueRef: {name: ` + p[0] + `-dlq}
  retryTopics: {deletionPolicy: Delete}
  delivery:
    ordering: Ordered` + p[2] + `
  sink: {uri: "` + p[1] + `"}
`)
	}
	return b.String()
}
