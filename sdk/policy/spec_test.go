package policy_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// TestDurationJSON: a Duration reads and writes Go's format, as Kubernetes' metav1.Duration does, so
// the RetryPolicy's durations read the same in the config file.
func TestDurationJSON(t *testing.T) {
	for text, d := range map[string]time.Duration{`"1m30s"`: 90 * time.Second, `"250ms"`: 250 * time.Millisecond, `"0s"`: 0} {
		var got policy.Duration
		if err := json.Unmarshal([]byte(text), &got); err != nil || got.Duration != d {
			t.Errorf("%s read as %v, %v; want %v", text, got.Duration, err, d)
		}
		if out, err := json.Marshal(policy.D(d)); err != nil || string(out) != text {
			t.Errorf("%v written as %s, %v; want %s", d, out, err, text)
		}
	}
	for text, want := range map[string]string{`90`: `a duration must be a string such as "1m30s"`, `"soon"`: `invalid duration "soon"`} {
		var d policy.Duration
		if err := json.Unmarshal([]byte(text), &d); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", text, err, want)
		}
	}
}

// TestFromSpecAppliesTheAPIDefaults: a Spec built in Go without the API server's defaulting runs
// with the defaults the RetryPolicy documents.
func TestFromSpecAppliesTheAPIDefaults(t *testing.T) {
	p := policy.FromSpec(policy.Spec{MaxAttempts: 3, Backoff: policy.Backoff{InitialDelay: policy.D(time.Second), MaxDelay: policy.D(4 * time.Second)},
		CircuitBreaker: &policy.CircuitBreaker{}})
	if p.Backoff.Multiplier != "2" || p.Backoff.Cap != retry.CapAfterJitter || p.Backoff.Jitter.Mode != retry.JitterNone {
		t.Errorf("backoff %+v", p.Backoff)
	}
	if p.AttemptTimeout != policy.DefaultAttemptTimeout || p.Classification.DefaultAction != retry.ActionDeadLetter {
		t.Errorf("attempt timeout %v, default action %s", p.AttemptTimeout, p.Classification.DefaultAction)
	}
	if !p.RetryAfter.Honor || p.RetryAfter.MaxDelay != 4*time.Second {
		t.Errorf("Retry-After %+v: honoured up to backoff.maxDelay by default", p.RetryAfter)
	}
	want := retry.CircuitBreakerConfig{FailureRatioPercent: 50, MinimumRequests: 10, Window: time.Minute, OpenDuration: 30 * time.Second,
		HalfOpenRequests: 5, CloseSuccessPercent: 80}
	if p.CircuitBreaker == nil || *p.CircuitBreaker != want {
		t.Errorf("circuit breaker %+v, want %+v", p.CircuitBreaker, want)
	}
}
