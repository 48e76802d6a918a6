package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	fanNS     = "fanout"
	fanSource = "fan-orders"
	// fanShared is the queue billing and shipping share; analytics has fanOwn.
	fanShared      = "shared-dlq"
	fanSharedTopic = "fan-orders.shared.dlq"
	fanOwn         = "analytics-dlq"
	fanOwnTopic    = "fan-orders.analytics.dlq"
	fanRecords     = 3000
)

// fanPipe is one of the three pipelines on fanSource: its policy and its sink's answers.
type fanPipe struct {
	name, group, queue, queueTopic string
	// index shifts the fate table, so that one record has different fates in different pipelines.
	index       int
	maxAttempts int
	// permanent is the sink's status for a record refused for good, transient the one for a
	// failure the policy retries.
	permanent, transient int
	policy               string
}

// The policies differ in attempts, backoff, tier naming and classification: billing retries 5xx
// (a rule) and dead-letters the rest; shipping retries only 503 through one ByDelay tier (equal
// delays); analytics retries everything (defaultAction) but 4xx.
var fanPipes = []fanPipe{
	{name: "billing", group: "fan-billing", queue: fanShared, queueTopic: fanSharedTopic, index: 0, maxAttempts: 4,
		permanent: http.StatusUnprocessableEntity, transient: http.StatusInternalServerError, policy: `
  maxAttempts: 4
  backoff: {initialDelay: 50ms, multiplier: "2", maxDelay: 200ms, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: server-errors, action: Retry, httpStatuses: ["500-599"]}`},
	{name: "shipping", group: "fan-shipping", queue: fanShared, queueTopic: fanSharedTopic, index: 1, maxAttempts: 3,
		permanent: http.StatusBadRequest, transient: http.StatusServiceUnavailable, policy: `
  maxAttempts: 3
  backoff: {initialDelay: 100ms, multiplier: "1", maxDelay: 100ms, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: unavailable, action: Retry, httpStatuses: ["503"]}`},
	{name: "analytics", group: "fan-analytics", queue: fanOwn, queueTopic: fanOwnTopic, index: 2, maxAttempts: 2,
		permanent: http.StatusConflict, transient: http.StatusBadGateway, policy: `
  maxAttempts: 2
  backoff: {initialDelay: 30ms, multiplier: "2", maxDelay: 30ms, jitter: {mode: None}}
  classification:
    defaultAction: Retry
    rules:
    - {name: client-errors, action: DeadLetter, httpStatuses: ["400-499"]}`},
}

func (p fanPipe) qualified() string { return fanNS + "/" + p.name }

func fanManifests(sinkURLs map[string]string) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: " + fanNS + "}\n")
	for _, q := range [][2]string{{fanShared, fanSharedTopic}, {fanOwn, fanOwnTopic}} {
		b.WriteString(`---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: ` + q[0] + `, namespace: ` + fanNS + `}
spec:
  topic: {name: ` + q[1] + `, partitions: 3}
  statusRefreshInterval: 2s
`)
	}
	for _, p := range fanPipes {
		naming := "ByAttempt"
		if p.name == "shipping" {
			naming = "ByDelay"
		}
		// Every pipeline names source.create: one owns the topic, the others consume it.
		b.WriteString(`---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: ` + p.name + `, namespace: ` + fanNS + `}
spec:` + p.policy + `
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: ` + p.name + `, namespace: ` + fanNS + `}
spec:
  source: {topic: ` + fanSource + `, consumerGroup: ` + p.group + `, create: {partitions: 3}}
  retryPolicyRef: {name: ` + p.name + `}
  deadLetterQueueRef: {name: ` + p.queue + `}
  retryTopics: {naming: ` + naming + `, deletionPolicy: Delete}
  delivery: {ordering: Unordered, maxInFlight: 200}
  sink: {uri: "` + sinkURLs[p.name] + `"}
`)
	}
	return b.String()
}

// fate is what a sink does with a record: refuse it for good, or fail its first k deliveries of a
// run (attempts 1..k, so a replay, which starts again at attempt 1, gets the same fate) and then
// accept it.
type fate struct {
	permanent bool
	k         int
}

// fanFate is the fate of record n at the sink of the pipeline with index i: 10% permanent, 15% one
// failure, 10% two, 5% three, 5% always failing, the rest accepted at once; shifted by 7 per
// pipeline.
func fanFate(i, n int) fate {
	switch m := (n + 7*i) % 20; {
	case m < 2:
		return fate{permanent: true}
	case m < 5:
		return fate{k: 1}
	case m < 7:
		return fate{k: 2}
	case m == 7:
		return fate{k: 3}
	case m == 8:
		return fate{k: 1000}
	default:
		return fate{}
	}
}

// outcome is what p's policy makes of f: the deliveries a run makes and, when dead-lettered, why.
func (p fanPipe) outcome(f fate) (deliveries int, reason string) {
	switch {
	case f.permanent:
		return 1, headers.ReasonNonRetriable
	case f.k >= p.maxAttempts:
		return p.maxAttempts, headers.ReasonMaxRetriesExceeded
	default:
		return f.k + 1, ""
	}
}

func fanKey(n int) string { return "f-" + strconv.Itoa(n) }

// fanCall is one request a sink received.
type fanCall struct {
	attempt                    int
	from, replayOf, idempotent string
	status                     int
}

// fanSink is one pipeline's sink: it answers by the record's fate and the delivery attempt, and
// records every request.
type fanSink struct {
	p     fanPipe
	mu    sync.Mutex
	calls map[string][]fanCall
	// strays are requests for keys that are not of the test's records.
	strays int
}

func (s *fanSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get(headers.HTTPKafkaKey)
	attempt, _ := strconv.Atoi(r.Header.Get(headers.HTTPRetryAttempt))
	n, err := strconv.Atoi(strings.TrimPrefix(key, "f-"))
	status := http.StatusOK
	f := fanFate(s.p.index, n)
	if err != nil {
		f = fate{} // not one of the fate table's records (ownFigures' lag-*): accepted
	}
	if f.permanent {
		status = s.p.permanent
	} else if attempt <= f.k {
		status = s.p.transient
	}
	s.mu.Lock()
	if err != nil || !strings.HasPrefix(key, "f-") {
		s.strays++
	} else {
		s.calls[key] = append(s.calls[key], fanCall{attempt: attempt, from: r.Header.Get(headers.HTTPDeliveredFrom),
			replayOf: r.Header.Get(headers.HTTPReplayOf), idempotent: r.Header.Get(headers.HTTPIdempotencyKey), status: status})
	}
	s.mu.Unlock()
	w.WriteHeader(status)
}

// snapshot copies the calls so far.
func (s *fanSink) snapshot() map[string][]fanCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]fanCall, len(s.calls))
	for k, v := range s.calls {
		out[k] = append([]fanCall(nil), v...)
	}
	return out
}

// accepted counts the distinct records answered 2xx.
func (s *fanSink) accepted() int {
	n := 0
	for _, calls := range s.snapshot() {
		for _, c := range calls {
			if c.status == http.StatusOK {
				n++
				break
			}
		}
	}
	return n
}

func (s *fanSink) requests() int {
	n := 0
	for _, calls := range s.snapshot() {
		n += len(calls)
	}
	return n
}

// fanDead is a dead letter as the test reads it from a queue's topic.
type fanDead struct {
	id, key, pipeline, reason, replayOf, message string
}

// topicOf is the topic of a "<topic>/<partition>/<offset>" coordinate.
func topicOf(coord string) string {
	if i := strings.LastIndexByte(coord, '/'); i > 0 {
		if j := strings.LastIndexByte(coord[:i], '/'); j > 0 {
			return coord[:j]
		}
	}
	return fmt.Sprintf("<malformed %q>", coord)
}

// fateTally logs how many records each pipeline delivers at once, after retries, dead-letters as
// exhausted and as refused, and returns how many records' outcomes differ between pipelines; it
// fails the test when a pipeline lacks one of the four.
func fateTally(t *testing.T) int {
	t.Helper()
	differ := 0
	tally := map[string]map[string]int{}
	for n := range fanRecords {
		seen := map[string]bool{}
		for _, p := range fanPipes {
			d, reason := p.outcome(fanFate(p.index, n))
			kind := reason
			switch {
			case reason == "" && d == 1:
				kind = "at once"
			case reason == "":
				kind = "after retries"
			}
			if tally[p.name] == nil {
				tally[p.name] = map[string]int{}
			}
			tally[p.name][kind]++
			seen[fmt.Sprint(kind, d)] = true
		}
		if len(seen) > 1 {
			differ++
		}
	}
	for _, p := range fanPipes {
		t.Logf("%s (maxAttempts %d): fates %v", p.name, p.maxAttempts, tally[p.name])
		if len(tally[p.name]) != 4 {
			t.Fatalf("%s: the fate table misses a kind of fate: %v", p.name, tally[p.name])
		}
	}
	return differ
}
