package retry_test

import (
	"math/rand"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

// The five seeds' policies, as a RetryPolicy would declare them. Their numbers come from
// shared/seeds/ and the "Retry semantics" table of shared/DESIGN.md.

const ms = time.Millisecond

// seed000Chatbot: max_retry 5 (6 deliveries), delay = min(1s * 2^retry_count + U(0, 1s), 300s) with
// retry_count starting at 1 for the first retry: 2s, 4s, 8s, 16s, 32s plus up to 1s, capped after
// the jitter. Retriable: the listed error names and 408, 429, 500, 502, 503, 504; everything else is
// non-retriable (seed 000's classify_error falls through to NON_RETRIABLE).
func seed000Chatbot() retry.Policy {
	return retry.Policy{
		MaxAttempts: 6,
		Backoff: retry.Backoff{
			InitialDelay: 2 * time.Second,
			Multiplier:   "2",
			MaxDelay:     300 * time.Second,
			Jitter:       retry.Jitter{Mode: retry.JitterAdditive, Max: time.Second},
			Cap:          retry.CapAfterJitter,
		},
		Classification: retry.Classification{
			DefaultAction: retry.ActionDeadLetter,
			Rules: []retry.Rule{
				{Name: "retriable-errors", Action: retry.ActionRetry, ErrorTypes: []string{
					"TimeoutError", "ConnectionError", "ServiceUnavailable", "RateLimitExceeded",
					"KafkaError", "MongoNetworkError", "WeaviateTimeoutError",
				}},
				{Name: "retriable-http", Action: retry.ActionRetry, HTTPStatuses: []string{"408", "429", "500", "502", "503", "504"}},
				{Name: "non-retriable", Action: retry.ActionDeadLetter,
					HTTPStatuses: []string{"400", "401", "403", "404", "422"},
					ErrorTypes:   []string{"ValidationError", "AuthenticationError", "PermissionError", "NotFoundError", "BusinessLogicError"},
				},
			},
		},
	}
}

// seed001Grading: Celery max_retries=3 (4 deliveries), 2s, 4s, 8s capped at 300s and then multiplied
// by U(0.8, 1.2); Retry-After preferred (capped at 5 minutes); grading SLA 20m for writing; circuit
// breaker: >50% failures over >=10 requests opens, 30s cooldown, half-open probes, >80% success closes.
// Seed 001 truncates the jittered delay to whole seconds with int(); the operator keeps nanoseconds.
func seed001Grading() retry.Policy {
	return retry.Policy{
		MaxAttempts: 4,
		Backoff: retry.Backoff{
			InitialDelay: 2 * time.Second,
			Multiplier:   "2",
			MaxDelay:     300 * time.Second,
			Jitter:       retry.Jitter{Mode: retry.JitterProportional, MinPercent: 80, MaxPercent: 120},
			Cap:          retry.CapBeforeJitter,
		},
		Classification: retry.Classification{
			DefaultAction: retry.ActionDeadLetter,
			Rules: []retry.Rule{
				{Name: "temporary", Action: retry.ActionRetry,
					ErrorTypes:   []string{"TemporaryError", "TimeoutError", "ConnectionError"},
					HTTPStatuses: []string{"408", "429", "500-599"},
				},
				{Name: "permanent", Action: retry.ActionDeadLetter, ErrorTypes: []string{"PermanentError", "ValidationError"}},
			},
		},
		AttemptTimeout: 30 * time.Second,
		Deadline:       20 * time.Minute,
		RetryAfter:     retry.RetryAfter{Honor: true, MaxDelay: 5 * time.Minute},
		CircuitBreaker: seed001Breaker(),
	}
}

func seed001Breaker() *retry.CircuitBreakerConfig {
	return &retry.CircuitBreakerConfig{
		FailureRatioPercent: 50, MinimumRequests: 10, Window: 60 * time.Second,
		OpenDuration: 30 * time.Second, HalfOpenRequests: 5, CloseSuccessPercent: 80,
	}
}

// seed002Delegation: 4 attempts in all, 1s, 2s, 4s capped at 10s (the 8s the seed lists would be a
// fifth delivery). The seed says only "exponential with jitter": we express it as Proportional
// 80..120 capped after the jitter, so no delay ever exceeds the seed's 10s cap. isRetryableError
// matches error names and message substrings; everything else fails at once.
func seed002Delegation() retry.Policy {
	return retry.Policy{
		MaxAttempts: 4,
		Backoff: retry.Backoff{
			InitialDelay: time.Second,
			Multiplier:   "2",
			MaxDelay:     10 * time.Second,
			Jitter:       retry.Jitter{Mode: retry.JitterProportional, MinPercent: 80, MaxPercent: 120},
			Cap:          retry.CapAfterJitter,
		},
		Classification: retry.Classification{
			DefaultAction: retry.ActionDeadLetter,
			Rules: []retry.Rule{
				{Name: "dynamodb-transient", Action: retry.ActionRetry, ErrorTypes: []string{
					"ProvisionedThroughputExceeded", "Throttling", "Throttled", "ServiceUnavailable", "InternalServerError",
				}},
				{Name: "transient-messages", Action: retry.ActionRetry, MessagePatterns: []string{
					`(?i)timeout`, `(?i)network`, `(?i)connection`, `(?i)econnrefused`, `(?i)enotfound`,
					`(?i)rate limit`, `\b429\b`, `\b50[0-4]\b`,
					`(?i)throttl`, `(?i)throughput`, `(?i)too many requests`,
					`(?i)service unavailable`, `(?i)internal server error`,
				}},
			},
		},
	}
}

// seed003Documents: delay = min(5m * 2^(attemptCount-1), 60m) from attempt 2 on: 10m, 20m, 40m, 60m,
// no jitter. Max attempts depend on the document type: 5 for chunks and threads, 3 for archives and
// messages. Each document type is a different pipeline stage (its own event and topic), so each is a
// ConsumerPipeline with its own RetryPolicy: this one for chunks and threads...
func seed003DocumentsChunks() retry.Policy {
	return retry.Policy{
		MaxAttempts: 5,
		Backoff: retry.Backoff{
			InitialDelay: 10 * time.Minute,
			Multiplier:   "2",
			MaxDelay:     60 * time.Minute,
			Jitter:       retry.Jitter{Mode: retry.JitterNone},
		},
		// The retry job requeues every stuck or failed document.
		Classification: retry.Classification{DefaultAction: retry.ActionRetry},
	}
}

// ...and this one, identical but for MaxAttempts, for archives and messages.
func seed003DocumentsArchives() retry.Policy {
	p := seed003DocumentsChunks()
	p.MaxAttempts = 3
	return p
}

// seed004Generic: max_attempts 3, delay = min(1s * 2^attempt, 10s) * (0.5 + U(0,1)): 1s, 2s
// proportional 50..150 after the cap. Transient errors (throttling, timeout, network) are retried;
// permanent ones (bad data, schema mismatch) and anything unknown go to the error topic.
func seed004Generic() retry.Policy {
	return retry.Policy{
		MaxAttempts: 3,
		Backoff: retry.Backoff{
			InitialDelay: time.Second,
			Multiplier:   "2",
			MaxDelay:     10 * time.Second,
			Jitter:       retry.Jitter{Mode: retry.JitterProportional, MinPercent: 50, MaxPercent: 150},
			Cap:          retry.CapBeforeJitter,
		},
		Classification: retry.Classification{
			DefaultAction: retry.ActionDeadLetter,
			Rules: []retry.Rule{
				{Name: "transient", Action: retry.ActionRetry,
					ErrorTypes:      []string{"TransientError", "TimeoutError", "ConnectionError", "ThrottlingException"},
					MessagePatterns: []string{`(?i)throttl`, `(?i)timed? ?out`, `(?i)network`},
				},
				{Name: "permanent", Action: retry.ActionDeadLetter, ErrorTypes: []string{"SchemaMismatchError", "ValidationError", "JSONDecodeError"}},
			},
		},
	}
}

type seedCase struct {
	name    string
	policy  retry.Policy
	nominal []time.Duration
	windows [][2]time.Duration
	total   retry.Range
}

func seedCases() []seedCase {
	s := time.Second
	m := time.Minute
	return []seedCase{
		{
			name:    "seed 000 chatbot waits 2s 4s 8s 16s 32s plus up to 1s each",
			policy:  seed000Chatbot(),
			nominal: []time.Duration{2 * s, 4 * s, 8 * s, 16 * s, 32 * s},
			windows: [][2]time.Duration{{2 * s, 3 * s}, {4 * s, 5 * s}, {8 * s, 9 * s}, {16 * s, 17 * s}, {32 * s, 33 * s}},
			total:   retry.Range{Earliest: 62 * s, Latest: 67 * s},
		},
		{
			name:    "seed 001 grading waits 2s 4s 8s times 0.8 to 1.2",
			policy:  seed001Grading(),
			nominal: []time.Duration{2 * s, 4 * s, 8 * s},
			windows: [][2]time.Duration{{1600 * ms, 2400 * ms}, {3200 * ms, 4800 * ms}, {6400 * ms, 9600 * ms}},
			total:   retry.Range{Earliest: 11200 * ms, Latest: 16800 * ms},
		},
		{
			name:    "seed 002 delegation waits 1s 2s 4s times 0.8 to 1.2",
			policy:  seed002Delegation(),
			nominal: []time.Duration{1 * s, 2 * s, 4 * s},
			windows: [][2]time.Duration{{800 * ms, 1200 * ms}, {1600 * ms, 2400 * ms}, {3200 * ms, 4800 * ms}},
			total:   retry.Range{Earliest: 5600 * ms, Latest: 8400 * ms},
		},
		{
			name:    "seed 003 chunks and threads wait 10m 20m 40m 60m without jitter",
			policy:  seed003DocumentsChunks(),
			nominal: []time.Duration{10 * m, 20 * m, 40 * m, 60 * m},
			windows: [][2]time.Duration{{10 * m, 10 * m}, {20 * m, 20 * m}, {40 * m, 40 * m}, {60 * m, 60 * m}},
			total:   retry.Range{Earliest: 130 * m, Latest: 130 * m},
		},
		{
			name:    "seed 003 archives and messages wait 10m 20m without jitter",
			policy:  seed003DocumentsArchives(),
			nominal: []time.Duration{10 * m, 20 * m},
			windows: [][2]time.Duration{{10 * m, 10 * m}, {20 * m, 20 * m}},
			total:   retry.Range{Earliest: 30 * m, Latest: 30 * m},
		},
		{
			name:    "seed 004 generic waits 1s 2s times 0.5 to 1.5",
			policy:  seed004Generic(),
			nominal: []time.Duration{1 * s, 2 * s},
			windows: [][2]time.Duration{{500 * ms, 1500 * ms}, {1 * s, 3 * s}},
			total:   retry.Range{Earliest: 1500 * ms, Latest: 4500 * ms},
		},
	}
}

func mustCompile(t testing.TB, p retry.Policy) *retry.Compiled {
	t.Helper()
	c, err := retry.Compile(p)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

func TestSeedSchedules(t *testing.T) {
	for _, tc := range seedCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, tc.policy)
			plan := c.Plan()
			if got, want := len(plan.Schedule), int(tc.policy.MaxAttempts)-1; got != want || got != len(tc.nominal) {
				t.Fatalf("schedule has %d retries, want %d (= %d expected delays)", got, want, len(tc.nominal))
			}
			for i, st := range plan.Schedule {
				n := int32(i + 1)
				want := retry.Window{Attempt: n + 1, Nominal: tc.nominal[i], Earliest: tc.windows[i][0], Latest: tc.windows[i][1]}
				if st.Window != want {
					t.Errorf("retry %d: window %+v, want %+v", n, st.Window, want)
				}
				if st.Tier != n {
					t.Errorf("retry %d: tier %d, want %d", n, st.Tier, n)
				}
				if w, ok := c.Window(n); !ok || w != want {
					t.Errorf("Window(%d) = %+v, %v; want %+v", n, w, ok, want)
				}
			}
			if plan.TotalDelay != tc.total {
				t.Errorf("total delay %+v, want %+v", plan.TotalDelay, tc.total)
			}
		})
	}
}

func TestSeedSamplesCoverTheirWindows(t *testing.T) {
	const samples = 10000
	for _, tc := range seedCases() {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, tc.policy)
			rng := rand.New(rand.NewSource(42))
			for n := int32(1); n <= c.Retries(); n++ {
				w, _ := c.Window(n)
				lo, hi := time.Duration(1<<62), time.Duration(-1)
				var sum float64
				for range samples {
					d, ok := c.Sample(n, rng)
					if !ok {
						t.Fatalf("Sample(%d) not ok", n)
					}
					if d < w.Earliest || d > w.Latest {
						t.Fatalf("retry %d: sample %v outside [%v, %v]", n, d, w.Earliest, w.Latest)
					}
					lo, hi = min(lo, d), max(hi, d)
					sum += float64(d)
				}
				width := w.Latest - w.Earliest
				slack := width / 50 // 2% of the window
				if lo-w.Earliest > slack || w.Latest-hi > slack {
					t.Errorf("retry %d: samples span [%v, %v], want within %v of [%v, %v]", n, lo, hi, slack, w.Earliest, w.Latest)
				}
				// No seed's cap bites, so the draw is uniform over the window: its mean is the midpoint.
				mean := sum / samples
				mid := float64(w.Earliest+w.Latest) / 2
				if diff := mean - mid; diff > float64(slack) || diff < -float64(slack) {
					t.Errorf("retry %d: mean sample %v, want within %v of the midpoint %v", n, time.Duration(mean), slack, time.Duration(mid))
				}
			}
		})
	}
}

func newSeededRand(seed int64) *rand.Rand { return rand.New(rand.NewSource(seed)) }
