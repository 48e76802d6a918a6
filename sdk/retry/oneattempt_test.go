package retry_test

import (
	"testing"

	"github.com/retryops/retry-operator/sdk/retry"
)

// A policy of one attempt compiles without a backoff (which would mean nothing for it): no retry,
// no tier. A backoff it does give is still checked.
func TestOneAttemptCompilesWithoutBackoff(t *testing.T) {
	c, err := retry.Compile(retry.Policy{MaxAttempts: 1})
	if err != nil {
		t.Fatalf("Compile(maxAttempts 1, no backoff): %v", err)
	}
	if c.Retries() != 0 || len(c.Plan().Tiers(false)) != 0 {
		t.Errorf("%d retries, tiers %v: want none", c.Retries(), c.Plan().Tiers(false))
	}
	if _, err := retry.Compile(retry.Policy{MaxAttempts: 1, Backoff: retry.Backoff{Multiplier: "0.5"}}); err == nil {
		t.Error("a one-attempt policy with multiplier 0.5 compiled: a backoff given must still be valid")
	}
	if _, err := retry.Compile(retry.Policy{MaxAttempts: 2}); err == nil {
		t.Error("maxAttempts 2 without a backoff compiled")
	}
}
