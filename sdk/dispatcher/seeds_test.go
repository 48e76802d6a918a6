package dispatcher_test

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

func i32p(v int32) *int32 { return &v }

var designRules = []policy.ClassificationRule{
	{Name: "transient-http", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"408", "429", "500-599"}},
	{Name: "permanent-http", Action: policy.ActionDeadLetter, HTTPStatuses: []policy.HTTPStatusMatch{"400", "401", "403", "404", "422"}},
}

// seedCase is one seed's policy, with its seconds scaled down so the test runs in seconds. Every
// delay is the seed's delay times scale; multipliers, attempt counts, jitter shapes and cap
// placements are the seed's own.
type seedCase struct {
	name  string
	scale string
	pol   *policy.Spec
	// extra records beyond the common recover/always/non-retriable ones
	throttle bool // 429 with Retry-After honoured up to the cap (seed 001)
	perType  bool // seed 003: a per-document-type attempt limit via error type
}

func seedCases() []seedCase {
	return []seedCase{
		{
			// seed 000: 1 + 5 retries, 2s 4s 8s 16s 32s, additive U(0,1s) then a 300s cap.
			name: "000-chatbot", scale: "x1/20: 100ms..1.6s, jitter 50ms, cap 15s",
			pol: &policy.Spec{
				MaxAttempts: 6,
				Backoff: policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(15 * time.Second),
					Jitter: &policy.Jitter{Mode: policy.JitterAdditive, Max: dt.PD(50 * time.Millisecond)}, Cap: policy.CapAfterJitter},
				Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: append(append([]policy.ClassificationRule{}, designRules...),
					policy.ClassificationRule{Name: "transient-errors", Action: policy.ActionRetry, ErrorTypes: []string{"TimeoutError", "ConnectionError", "ServiceUnavailable"}})},
			},
		},
		{
			// seed 001: 1 + 3 retries, 2s 4s 8s, proportional x U(0.8,1.2) after a 300s cap,
			// Retry-After honoured (capped), a 20 min SLA deadline.
			name: "001-grading", scale: "x1/20: 100ms 200ms 400ms, cap 15s; Retry-After cap 1.5s; deadline 60s",
			pol: &policy.Spec{
				MaxAttempts: 4,
				Backoff: policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(15 * time.Second),
					Jitter: &policy.Jitter{Mode: policy.JitterProportional, MinPercent: i32p(80), MaxPercent: i32p(120)}, Cap: policy.CapBeforeJitter},
				Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: designRules},
				RetryAfter:     &policy.RetryAfter{Mode: policy.RetryAfterHonor, MaxDelay: dt.PD(1500 * time.Millisecond)},
				Deadline:       dt.PD(60 * time.Second),
			},
			throttle: true,
		},
		{
			// seed 002: 4 in all, 1s 2s 4s with a 10s cap, some jitter; classification by message.
			name: "002-delegation", scale: "x1/10: 100ms 200ms 400ms, jitter 10ms, cap 1s",
			pol: &policy.Spec{
				MaxAttempts: 4,
				Backoff: policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second),
					Jitter: &policy.Jitter{Mode: policy.JitterAdditive, Max: dt.PD(10 * time.Millisecond)}, Cap: policy.CapAfterJitter},
				Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
					{Name: "transient-messages", Action: policy.ActionRetry, MessagePatterns: []string{"(?i)timeout", "(?i)econnrefused", "(?i)throttl", "429"}},
					{Name: "server-errors", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"500-599"}},
				}},
			},
		},
		{
			// seed 003: 5 in all (3 for archives), 10m 20m 40m 60m (5m x 2^(attempt-1), 60m cap), no jitter.
			name: "003-documents", scale: "x1/6000: 100ms 200ms 400ms 600ms (multiplier 2, cap 600ms)",
			pol: &policy.Spec{
				MaxAttempts: 5,
				Backoff:     policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(600 * time.Millisecond)},
				Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: append([]policy.ClassificationRule{
					{Name: "archives", Action: policy.ActionRetry, ErrorTypes: []string{"ArchiveError", "MessageError"}, MaxAttempts: i32p(3)},
				}, designRules...)},
			},
			perType: true,
		},
		{
			// seed 004: 3 in all, 1s 2s, proportional x U(0.5,1.5) after a 10s cap.
			name: "004-generic", scale: "x1/10: 100ms 200ms, cap 1s",
			pol: &policy.Spec{
				MaxAttempts: 3,
				Backoff: policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second),
					Jitter: &policy.Jitter{Mode: policy.JitterProportional, MinPercent: i32p(50), MaxPercent: i32p(150)}, Cap: policy.CapBeforeJitter},
				Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: designRules},
			},
		},
	}
}

// TestSeedScenarios runs each seed's retry schedule end to end through kfake and an HTTP sink: a
// record failing maxAttempts-1 times then succeeding (delays within the windows, attempt numbers),
// an always-failing record (dead-lettered after exactly maxAttempts deliveries with every context
// header), a non-retriable 400 (dead-lettered after one delivery), and per seed: Retry-After
// honoured up to its cap (001), message-pattern classification (002), a per-type attempt limit
// (003), a dead letter topic on a separate cluster (000).
func TestSeedScenarios(t *testing.T) {
	for _, sc := range seedCases() {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			t.Logf("scaling: %s", sc.scale)
			comp, err := retry.Compile(policy.FromSpec(*sc.pol))
			if err != nil {
				t.Fatal(err)
			}
			max := int(sc.pol.MaxAttempts)
			failStatus, failBody := 503, "service unavailable"
			if sc.name == "002-delegation" {
				failStatus, failBody = 502, "upstream TIMEOUT after 30s"
			}
			behavior := func(r *dt.Request) dt.Response {
				switch string(r.Body) {
				case "recover":
					if r.Attempt < max {
						return dt.Response{Status: failStatus, Body: failBody}
					}
				case "always":
					return dt.Response{Status: failStatus, Body: failBody}
				case "bad":
					return dt.Response{Status: 400, Body: "validation failed: field x"}
				case "throttled":
					if r.Attempt == 1 {
						return dt.Response{Status: 429, RetryAfter: "1"}
					}
				case "throttled-capped":
					if r.Attempt == 1 {
						return dt.Response{Status: 429, RetryAfter: "3"}
					}
				case "archive":
					return dt.Response{Status: 500, ErrorType: "ArchiveError", Body: "archive store down"}
				case "unmatched":
					return dt.Response{Status: 409, Body: "conflict"}
				}
				return dt.Response{}
			}
			p := newPipeline(t, "seed"+sc.name[:3], 2, sc.pol, behavior)
			dlqCluster := p.c
			if sc.name == "000-chatbot" {
				dlqCluster = dt.Cluster(t, map[string]int32{p.cfg.Topics.DeadLetter: 1})
				p.cfg.DeadLetterKafka = &p.cfg.Kafka
				dk := p.cfg.Kafka
				dk.BootstrapServers = dlqCluster.ListenAddrs()
				p.cfg.DeadLetterKafka = &dk
			}
			start(t, dispatcher.Options{Config: p.cfg})

			bodies := []string{"recover", "always", "bad", "ok"}
			if sc.throttle {
				bodies = append(bodies, "throttled", "throttled-capped")
			}
			if sc.perType {
				bodies = append(bodies, "archive")
			}
			if sc.name == "002-delegation" {
				bodies = append(bodies, "unmatched")
			}
			recs := make([]*kgo.Record, len(bodies))
			for i, b := range bodies {
				recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("k-" + b), Value: []byte(b),
					Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("t-" + b)}}}
			}
			dt.Produce(t, p.prod, recs...)
			key := map[string]string{}
			for _, r := range recs {
				key[string(r.Value)] = headers.IdempotencyKey(r.Topic, r.Partition, r.Offset)
			}

			wantDLQ := 2 // always, bad
			if sc.perType {
				wantDLQ++
			}
			if sc.name == "002-delegation" {
				wantDLQ++
			}
			dl := dt.ReadTopic(t, dlqCluster, p.cfg.Topics.DeadLetter, wantDLQ, 30*time.Second)
			if len(dl) != wantDLQ {
				t.Fatalf("dead letters: got %d, want %d", len(dl), wantDLQ)
			}
			p.sink.WaitFor(t, 30*time.Second, func([]*dt.Request) bool {
				for _, b := range []string{"recover", "ok", "throttled", "throttled-capped"} {
					if k, ok := key[b]; ok {
						rs := p.sink.ByKey(k)
						if len(rs) == 0 || rs[len(rs)-1].Status != 200 {
							return false
						}
					}
				}
				return true
			}, "the recovering records delivered")

			// recover: maxAttempts deliveries, attempts 1..max, delays within the windows.
			rs := p.sink.ByKey(key["recover"])
			if len(rs) != max {
				t.Fatalf("recover: %d deliveries, want %d", len(rs), max)
			}
			for i, r := range rs {
				if r.Attempt != i+1 {
					t.Errorf("recover: delivery %d has Retry-Attempt %d", i, r.Attempt)
				}
				if r.Header.Get(headers.HTTPIdempotencyKey) != key["recover"] {
					t.Errorf("recover: delivery %d idempotency key %q, want %q", i, r.Header.Get(headers.HTTPIdempotencyKey), key["recover"])
				}
				if r.Header.Get("Kafka-Header-trace-id") != "t-recover" || r.Header.Get(headers.HTTPKafkaKey) != "k-recover" {
					t.Errorf("recover: delivery %d lost the key or headers: %v", i, r.Header)
				}
				if i == 0 {
					continue
				}
				w, _ := comp.Window(int32(i))
				delay := retryDelay(t, p, r)
				t.Logf("retry %d: delay %v, window [%v, %v]", i, delay, w.Earliest, w.Latest)
				if delay < w.Earliest || delay > w.Latest {
					t.Errorf("retry %d: delay %v outside [%v, %v]", i, delay, w.Earliest, w.Latest)
				}
			}

			byKey := map[string]*kgo.Record{}
			for _, r := range dl {
				byKey[string(r.Key)] = r
			}
			// always: dead-lettered after exactly maxAttempts deliveries, every context header.
			if n := len(p.sink.ByKey(key["always"])); n != max {
				t.Errorf("always: %d deliveries, want %d", n, max)
			}
			ruleFor := "transient-http"
			if sc.name == "002-delegation" {
				ruleFor = "transient-messages"
			}
			checkDeadLetter(t, byKey["k-always"], p, "always", headers.ReasonMaxRetriesExceeded, max, ruleFor, strconv.Itoa(failStatus))
			// bad: one delivery, non-retriable.
			if n := len(p.sink.ByKey(key["bad"])); n != 1 {
				t.Errorf("bad: %d deliveries, want 1", n)
			}
			if sc.name == "002-delegation" {
				checkDeadLetter(t, byKey["k-bad"], p, "bad", headers.ReasonNonRetriable, 1, "", "400")
				checkDeadLetter(t, byKey["k-unmatched"], p, "unmatched", headers.ReasonNonRetriable, 1, "", "409")
			} else {
				checkDeadLetter(t, byKey["k-bad"], p, "bad", headers.ReasonNonRetriable, 1, "permanent-http", "400")
			}
			if sc.perType {
				if n := len(p.sink.ByKey(key["archive"])); n != 3 {
					t.Errorf("archive: %d deliveries, want 3 (the archives rule's maxAttempts)", n)
				}
				checkDeadLetter(t, byKey["k-archive"], p, "archive", headers.ReasonMaxRetriesExceeded, 3, "archives", "500")
				if et, _ := dt.Header(byKey["k-archive"], headers.ErrorType); et != "ArchiveError" {
					t.Errorf("archive: error type %q", et)
				}
			}
			if sc.throttle {
				for b, want := range map[string]time.Duration{"throttled": time.Second, "throttled-capped": 1500 * time.Millisecond} {
					rs := p.sink.ByKey(key[b])
					if len(rs) != 2 {
						t.Errorf("%s: %d deliveries, want 2", b, len(rs))
						continue
					}
					delay := retryDelay(t, p, rs[1])
					t.Logf("%s: Retry-After delay %v (want %v)", b, delay, want)
					if delay != want {
						t.Errorf("%s: delay %v, want %v", b, delay, want)
					}
				}
			}
		})
	}
}

// retryDelay returns the delay the engine chose before the retry r (from its failure to its due
// time, read from the retry record r was delivered from), after checking that r did not arrive at
// the sink before that due time. How late it arrived depends on the machine's load and is not
// checked here; the fake-clock tests (clock_test.go, lookahead_test.go) check delivery at the due
// time exactly.
func retryDelay(t *testing.T, p *pipeline, r *dt.Request) time.Duration {
	t.Helper()
	from := strings.Split(r.DeliveredFrom, "/")
	if len(from) != 3 {
		t.Fatalf("delivered from %q", r.DeliveredFrom)
	}
	part, _ := strconv.ParseInt(from[1], 10, 32)
	off, _ := strconv.ParseInt(from[2], 10, 64)
	for _, rec := range dt.ReadTopic(t, p.c, from[0], int(topicRecords(t, p, from[0])), 20*time.Second) {
		if rec.Partition != int32(part) || rec.Offset != off {
			continue
		}
		v, _ := dt.Header(rec, headers.Due)
		f, _ := dt.Header(rec, headers.LastFailure)
		due, err1 := headers.ParseTime(v)
		failed, err2 := headers.ParseTime(f)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: due %q, last failure %q", r.DeliveredFrom, v, f)
		}
		if r.At.Before(due) {
			t.Errorf("%s delivered %v before its due time", r.DeliveredFrom, due.Sub(r.At))
		}
		return due.Sub(failed)
	}
	t.Fatalf("no record at %s", r.DeliveredFrom)
	return 0
}

// checkDeadLetter checks a dead letter's key, value, original headers and every context header.
func checkDeadLetter(t *testing.T, r *kgo.Record, p *pipeline, body, reason string, attempts int, rule, status string) {
	t.Helper()
	if r == nil {
		t.Errorf("%s: no dead letter", body)
		return
	}
	if string(r.Value) != body || string(r.Key) != "k-"+body {
		t.Errorf("%s: dead letter key/value %q/%q", body, r.Key, r.Value)
	}
	if v, _ := dt.Header(r, "trace-id"); v != "t-"+body {
		t.Errorf("%s: original header lost", body)
	}
	want := map[string]string{
		headers.OriginalTopic: p.cfg.Topics.Source,
		headers.ConsumerGroup: p.cfg.ConsumerGroup,
		headers.Pipeline:      p.cfg.PipelineID(),
		headers.Attempts:      strconv.Itoa(attempts),
		headers.Reason:        reason,
		headers.HTTPStatus:    status,
	}
	if rule != "" {
		want[headers.Rule] = rule
	}
	for k, v := range want {
		if got, ok := dt.Header(r, k); !ok || got != v {
			t.Errorf("%s: header %s = %q (present %v), want %q", body, k, got, ok, v)
		}
	}
	for _, k := range []string{headers.OriginalPartition, headers.OriginalOffset, headers.OriginalTimestamp,
		headers.FirstFailure, headers.LastFailure, headers.ErrorType, headers.ErrorMessage} {
		if v, ok := dt.Header(r, k); !ok || v == "" {
			t.Errorf("%s: header %s missing", body, k)
		}
	}
	first, err1 := headers.ParseTime(mustHeader(r, headers.FirstFailure))
	last, err2 := headers.ParseTime(mustHeader(r, headers.LastFailure))
	if err1 != nil || err2 != nil || last.Before(first) {
		t.Errorf("%s: first/last failure %v %v (%v %v)", body, first, last, err1, err2)
	}
	for _, h := range r.Headers {
		if bytes.Count([]byte(h.Key), []byte(headers.Prefix)) > 0 {
			n := 0
			for _, g := range r.Headers {
				if g.Key == h.Key {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s: header %s appears %d times", body, h.Key, n)
			}
		}
	}
}

func mustHeader(r *kgo.Record, k string) string {
	v, _ := dt.Header(r, k)
	return v
}
