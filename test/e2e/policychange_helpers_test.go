package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	pcNS     = "policychange"
	pcName   = "pc"
	pcSource = "pc-tasks"
	pcDLQ    = "pc-tasks.dlq"
	pcGroup  = "pc-group"
	// pcRecords are produced at pcRate a second, so that when the last tier first holds records
	// (about 9 s after the first record: 3 s in the first tier, then 6 s in the second) records
	// are still arriving and every tier holds some.
	pcRecords = 300
	pcRate    = 25
	// pcMinWaiting is how many unconsumed records each old tier must hold when the policy changes.
	pcMinWaiting = 5
	// pcSample is the period of the watcher sampling topics, lags and the dispatcher config.
	pcSample = 50 * time.Millisecond
)

// The sink answers by the delivery attempt (Retry-Attempt) and the record's class, n%4:
//
//	0 pcOK:     2xx on attempt 1
//	1 pcTwo:    503 on attempt 1, 2xx from attempt 2
//	2 pcFour:   503 on attempts 1-3, 2xx from attempt 4
//	3 pcNever:  503 always
//
// 503 is retriable. So under the first policy (maxAttempts 4) pcTwo records wait in the first tier,
// pcFour and pcNever ones in all three; under the second (maxAttempts 2) pcFour records can no
// longer succeed. Whatever the moment of the change, every record ends delivered or dead-lettered
// as max_retries_exceeded: pcOK and pcTwo delivered, pcNever dead-lettered, pcFour either
// (delivered exactly when its attempt 4 happened).
const (
	pcOK = iota
	pcTwo
	pcFour
	pcNever
)

func pcClass(n int) int { return n % 4 }

func pcPolicy(maxAttempts int, initialDelay string) string {
	return `apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: ` + pcName + `, namespace: ` + pcNS + `}
spec:
  maxAttempts: ` + strconv.Itoa(maxAttempts) + `
  backoff: {initialDelay: ` + initialDelay + `, multiplier: "2", maxDelay: 30s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 5s
`
}

func pcManifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + pcNS + `}
---
` + pcPolicy(4, "3s") + `---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: pc-dlq, namespace: ` + pcNS + `}
spec:
  topic: {name: ` + pcDLQ + `, partitions: 3}
  deletionPolicy: Retain
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: ` + pcName + `, namespace: ` + pcNS + `}
spec:
  source: {topic: ` + pcSource + `, consumerGroup: ` + pcGroup + `, create: {partitions: 3}}
  retryTopics: {naming: ByDelay, deletionPolicy: Delete}
  retryPolicyRef: {name: ` + pcName + `}
  deadLetterQueueRef: {name: pc-dlq}
  delivery: {ordering: Unordered, maxInFlight: 50}
  sink: {uri: "` + sinkURL + `"}
  replicas: 2
`
}

// pcAttempt is one request the sink received.
type pcAttempt struct {
	at      time.Time
	attempt int
	from    string // Retryops-Delivered-From: the topic/partition/offset consumed
	ok      bool
}

type pcSink struct {
	mu  sync.Mutex
	got map[string][]pcAttempt
}

func (s *pcSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get(headers.HTTPKafkaKey)
	attempt, _ := strconv.Atoi(r.Header.Get(headers.HTTPRetryAttempt))
	n, err := strconv.Atoi(strings.TrimPrefix(key, "demo-"))
	ok := err == nil
	if ok {
		switch pcClass(n) {
		case pcTwo:
			ok = attempt >= 2
		case pcFour:
			ok = attempt >= 4
		case pcNever:
			ok = false
		}
	}
	s.mu.Lock()
	if s.got == nil {
		s.got = map[string][]pcAttempt{}
	}
	s.got[key] = append(s.got[key], pcAttempt{at: time.Now(), attempt: attempt, from: r.Header.Get(headers.HTTPDeliveredFrom), ok: ok})
	s.mu.Unlock()
	if !ok {
		http.Error(w, "test sink: try again later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// delivered returns the keys the sink accepted, with the attempt that succeeded first.
func (s *pcSink) delivered() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, as := range s.got {
		for _, a := range as {
			if a.ok {
				out[k] = a.attempt
				break
			}
		}
	}
	return out
}

func (s *pcSink) attempts(key string) []pcAttempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pcAttempt(nil), s.got[key]...)
}

// pcDeadLetters reads the DLQ topic from the start.
type pcDeadLetters struct {
	mu  sync.Mutex
	cl  *kgo.Client
	got map[string][]map[string]string
}

func (d *pcDeadLetters) poll(ctx context.Context) map[string][]map[string]string {
	pollCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	fetches := d.cl.PollFetches(pollCtx)
	d.mu.Lock()
	defer d.mu.Unlock()
	fetches.EachRecord(func(r *kgo.Record) {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		d.got[string(r.Key)] = append(d.got[string(r.Key)], h)
	})
	out := make(map[string][]map[string]string, len(d.got))
	for k, v := range d.got {
		out[k] = v
	}
	return out
}

// pcTierState is what the watcher knows of one retry tier of the first policy.
type pcTierState struct {
	exists     bool
	lag        int64 // records the group has not consumed, at the last sample while it existed
	sampledAt  time.Time
	drainedAt  time.Time // first sample after the change with lag 0
	listedAt   time.Time // first sample where topics.draining listed it while it held records
	goneAt     time.Time
	lagAtGone  int64 // lag of the last sample before it was gone
	lastSeenAt time.Time
	reappeared bool
	keys       map[string]bool // keys of every record read from it
}

// tierLag is, per topic of topics that exists, the records past the group's committed offsets (or
// past the start when it committed nothing).
func tierLag(ctx context.Context, adm *kadm.Client, group string, topics []string) (exists map[string]bool, lag map[string]int64, err error) {
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		return nil, nil, err
	}
	exists, lag = map[string]bool{}, map[string]int64{}
	var present []string
	for _, t := range topics {
		if d, ok := td[t]; ok && d.Err == nil {
			exists[t] = true
			present = append(present, t)
		}
	}
	if len(present) == 0 {
		return exists, lag, nil
	}
	ends, err := adm.ListEndOffsets(ctx, present...)
	if err != nil {
		return nil, nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, present...)
	if err != nil {
		return nil, nil, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, nil, err
	}
	var ferr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			ferr = fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err)
			return
		}
		at := int64(0)
		if s, ok := starts.Lookup(o.Topic, o.Partition); ok && s.Err == nil {
			at = s.Offset
		}
		if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At > at {
			at = c.At
		}
		lag[o.Topic] += max(o.Offset-at, 0)
	})
	if ferr != nil {
		return nil, nil, ferr
	}
	return exists, lag, nil
}
