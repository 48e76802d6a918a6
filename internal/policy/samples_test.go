package policy_test

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

const s = time.Second

// loadSample compiles config/samples/retry_v1alpha1_retrypolicy_<name>.yaml.
func loadSample(t *testing.T, name string) *retry.Compiled {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "samples", "retry_v1alpha1_retrypolicy_"+name+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	rp := &retryv1alpha1.RetryPolicy{}
	if err := yaml.UnmarshalStrict(data, rp); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if rp.Name != name {
		t.Fatalf("sample %s is named %q", name, rp.Name)
	}
	c, err := retry.Compile(policy.FromSpec(rp.Spec))
	if err != nil {
		t.Fatalf("%s does not compile: %v", name, err)
	}
	return c
}

type window struct{ nominal, earliest, latest time.Duration }

// The seeds' own tables (shared/seeds, summarised in DESIGN.md), reproduced through the samples.
var seedSchedules = []struct {
	sample   string
	seed     string
	attempts int32
	windows  []window
}{
	{"chatbot", "000: 1 + 5 retries, min(1s*2^n + U(0,1s), 300s)", 6, []window{
		{2 * s, 2 * s, 3 * s}, {4 * s, 4 * s, 5 * s}, {8 * s, 8 * s, 9 * s}, {16 * s, 16 * s, 17 * s}, {32 * s, 32 * s, 33 * s}}},
	{"grading", "001: 1 + 3 retries, min(2^n, 300s) * U(0.8, 1.2)", 4, []window{
		{2 * s, 1600 * time.Millisecond, 2400 * time.Millisecond}, {4 * s, 3200 * time.Millisecond, 4800 * time.Millisecond}, {8 * s, 6400 * time.Millisecond, 9600 * time.Millisecond}}},
	{"delegation", "002: 4 attempts, 1s 2s 4s capped at 10s, with jitter", 4, []window{
		{1 * s, 800 * time.Millisecond, 1200 * time.Millisecond}, {2 * s, 1600 * time.Millisecond, 2400 * time.Millisecond}, {4 * s, 3200 * time.Millisecond, 4800 * time.Millisecond}}},
	{"documents", "003: min(5m * 2^(attempt-1), 60m) before attempts 2..5, no jitter", 5, []window{
		{10 * time.Minute, 10 * time.Minute, 10 * time.Minute}, {20 * time.Minute, 20 * time.Minute, 20 * time.Minute},
		{40 * time.Minute, 40 * time.Minute, 40 * time.Minute}, {60 * time.Minute, 60 * time.Minute, 60 * time.Minute}}},
	{"generic-worker", "004: 3 attempts, min(1s*2^n, 10s) * (0.5 + U(0,1))", 3, []window{
		{1 * s, 500 * time.Millisecond, 1500 * time.Millisecond}, {2 * s, 1 * s, 3 * s}}},
}

func TestSamplesReproduceTheSeedSchedules(t *testing.T) {
	for _, sc := range seedSchedules {
		t.Run(sc.sample, func(t *testing.T) {
			c := loadSample(t, sc.sample)
			plan := c.Plan()
			if plan.MaxAttempts != sc.attempts {
				t.Fatalf("seed %s: attempts %d, want %d", sc.seed, plan.MaxAttempts, sc.attempts)
			}
			if len(plan.Schedule) != len(sc.windows) {
				t.Fatalf("seed %s: %d retries, want %d", sc.seed, len(plan.Schedule), len(sc.windows))
			}
			rng := rand.New(rand.NewSource(int64(len(sc.sample))))
			for i, want := range sc.windows {
				got := plan.Schedule[i]
				if got.Attempt != int32(i+2) || got.Nominal != want.nominal || got.Earliest != want.earliest || got.Latest != want.latest {
					t.Errorf("retry %d: got attempt %d nominal %s window [%s, %s]; seed %s wants nominal %s window [%s, %s]",
						i+1, got.Attempt, got.Nominal, got.Earliest, got.Latest, sc.seed, want.nominal, want.earliest, want.latest)
				}
				// 10,000 samples all fall inside the window and cover it.
				lo, hi := time.Duration(1<<62), time.Duration(-1)
				for range 10000 {
					d, ok := c.Sample(int32(i+1), rng)
					if !ok {
						t.Fatalf("retry %d: no sample", i+1)
					}
					if d < want.earliest || d > want.latest {
						t.Fatalf("retry %d: sample %s outside [%s, %s]", i+1, d, want.earliest, want.latest)
					}
					lo, hi = min(lo, d), max(hi, d)
				}
				slack := (want.latest - want.earliest) / 50 // 2% of the window
				if lo > want.earliest+slack || hi < want.latest-slack {
					t.Errorf("retry %d: samples span [%s, %s], which does not cover [%s, %s] within 2%%", i+1, lo, hi, want.earliest, want.latest)
				}
			}
		})
	}
}

func TestSampleTotalsMatchTheDesign(t *testing.T) {
	plan := loadSample(t, "chatbot").Plan()
	if plan.TotalDelay.Earliest != 62*s || plan.TotalDelay.Latest != 67*s {
		t.Fatalf("chatbot total %s..%s, want 62s..67s", plan.TotalDelay.Earliest, plan.TotalDelay.Latest)
	}
}

func status(code int) retry.Outcome     { return retry.Outcome{HTTPStatus: code} }
func errType(name string) retry.Outcome { return retry.Outcome{ErrorType: name, Message: name} }
func message(m string) retry.Outcome    { return retry.Outcome{ErrorType: "Error", Message: m} }

// The seeds' retriable and non-retriable lists, classified through the samples.
func TestSamplesClassifyAsTheSeedsPrescribe(t *testing.T) {
	retryAll := func(o ...retry.Outcome) []retry.Outcome { return o }
	cases := map[string]struct{ retriable, permanent []retry.Outcome }{
		"chatbot": {
			retriable: retryAll(status(408), status(429), status(500), status(502), status(503), status(504),
				errType("TimeoutError"), errType("ConnectionError"), errType("ServiceUnavailable"), errType("RateLimitExceeded"),
				errType("KafkaError"), errType("MongoNetworkError"), errType("WeaviateTimeoutError"),
				retry.Outcome{Transport: retry.TransportTimeout, Message: "context deadline exceeded"}, retry.Outcome{Transport: retry.TransportConnectionRefused, Message: "connection refused"}),
			permanent: retryAll(status(400), status(401), status(403), status(404), status(422),
				errType("ValidationError"), errType("AuthenticationError"), errType("PermissionError"), errType("NotFoundError"), errType("BusinessLogicError")),
		},
		"grading": {
			retriable: retryAll(status(429), status(503), errType("TemporaryError"), errType("TimeoutError"), errType("ConnectionError")),
			permanent: retryAll(errType("PermanentError"), errType("ValidationError"), status(400)),
		},
		"delegation": {
			retriable: retryAll(message("Request timeout after 30s"), message("network error"), message("connect ECONNREFUSED 10.0.0.1:443"),
				message("getaddrinfo ENOTFOUND api"), message("Rate limit exceeded"), message("HTTP 429"), message("upstream returned 502"),
				message("DynamoDB: Throttling"), message("request was throttled"), message("throughput exceeded"), message("Too Many Requests"),
				message("Service Unavailable"), message("Internal Server Error"),
				errType("ProvisionedThroughputExceeded"), errType("Throttling"), errType("Throttled"), errType("ServiceUnavailable"), errType("InternalServerError")),
			permanent: retryAll(errType("ValidationError"), errType("NotFoundError"), errType("PermissionError"), message("invalid agent id")),
		},
		"documents": {
			retriable: retryAll(errType("EmbeddingError"), errType("ArchiveProcessingError")),
		},
		"generic-worker": {
			retriable: retryAll(errType("TransientError"), errType("TimeoutError"), errType("ThrottlingError"), status(503)),
			permanent: retryAll(errType("PermanentError"), errType("SchemaMismatchError"), errType("ValidationError"), errType("KeyError")),
		},
	}
	for sample, c := range cases {
		compiled := loadSample(t, sample)
		for _, o := range c.retriable {
			if got := compiled.Classify(o).Action; got != retry.ActionRetry {
				t.Errorf("%s: %+v classified %s, the seed retries it", sample, o, got)
			}
		}
		for _, o := range c.permanent {
			if got := compiled.Classify(o).Action; got != retry.ActionDeadLetter {
				t.Errorf("%s: %+v classified %s, the seed dead-letters it", sample, o, got)
			}
		}
	}
}

// Seed 003: archives and messages get 3 attempts in all, chunks and threads 5.
func TestDocumentsGiveArchivesThreeAttempts(t *testing.T) {
	c := loadSample(t, "documents")
	now := time.Now()
	archive := retry.Outcome{ErrorType: "ArchiveProcessingError", Message: "corrupt mbox"}
	chunk := retry.Outcome{ErrorType: "EmbeddingError", Message: "model unavailable"}
	if d := c.Decide(archive, 2, now, now, nil); d.Action != retry.ActionRetry {
		t.Fatalf("archive after 2 attempts: %+v, want a retry", d)
	}
	if d := c.Decide(archive, 3, now, now, nil); d.Action != retry.ActionDeadLetter || d.Reason != retry.ReasonMaxRetriesExceeded {
		t.Fatalf("archive after 3 attempts: %+v, want max_retries_exceeded", d)
	}
	if d := c.Decide(chunk, 4, now, now, nil); d.Action != retry.ActionRetry || d.Delay != 60*time.Minute {
		t.Fatalf("chunk after 4 attempts: %+v, want a retry in 60m", d)
	}
	if d := c.Decide(chunk, 5, now, now, nil); d.Reason != retry.ReasonMaxRetriesExceeded {
		t.Fatalf("chunk after 5 attempts: %+v, want max_retries_exceeded", d)
	}
}

// Seed 001: Retry-After is preferred, up to the cap; the SLA dead-letters late records.
func TestGradingHonoursRetryAfterAndTheDeadline(t *testing.T) {
	c := loadSample(t, "grading")
	now := time.Now()
	d := c.Decide(retry.Outcome{HTTPStatus: 429, RetryAfter: 45 * s}, 1, now, now, nil)
	if d.Action != retry.ActionRetry || d.Delay != 45*s {
		t.Fatalf("429 with Retry-After 45s: %+v", d)
	}
	d = c.Decide(retry.Outcome{HTTPStatus: 429, RetryAfter: time.Hour}, 1, now, now, nil)
	if d.Delay != 300*s {
		t.Fatalf("Retry-After 1h is capped at 300s, got %s", d.Delay)
	}
	if !c.Expired(now.Add(-21*time.Minute), now) || c.Expired(now.Add(-19*time.Minute), now) {
		t.Fatal("the 20m SLA is not applied")
	}
}

func TestFromSpecAppliesTheAPIDefaults(t *testing.T) {
	p := policy.FromSpec(retryv1alpha1.RetryPolicySpec{MaxAttempts: 3, Backoff: retryv1alpha1.Backoff{}})
	if p.Backoff.Multiplier != "2" || p.Backoff.Cap != retry.CapAfterJitter || p.AttemptTimeout != policy.DefaultAttemptTimeout ||
		p.Classification.DefaultAction != retry.ActionDeadLetter || !p.RetryAfter.Honor || p.CircuitBreaker != nil {
		t.Fatalf("defaults not applied: %+v", p)
	}
}
