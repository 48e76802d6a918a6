package policy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/policy"
)

// docs/resources.md's one-attempt policy (no backoff) compiles to no retry and no retry tier.
func TestOneAttemptPolicyCompiles(t *testing.T) {
	var rp retryv1alpha1.RetryPolicy
	rp.UID, rp.Generation = "u1", 1
	readme, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "docs", "resources.md"))
	if err != nil {
		t.Fatal(err)
	}
	const example = "apiVersion: retry.retryops.dev/v1alpha1\nkind: RetryPolicy\nmetadata: {name: no-retry}\nspec:\n  maxAttempts: 1\n  classification: {defaultAction: DeadLetter}\n"
	if !strings.Contains(string(readme), "```yaml\n"+example+"```") {
		t.Fatal("docs/resources.md no longer shows the one-attempt policy this test compiles")
	}
	if err := yaml.UnmarshalStrict([]byte(example), &rp); err != nil {
		t.Fatal(err)
	}
	c, err := policy.NewCache(4).Compile(&rp)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	// Tiers(false): a tier per retry (ByAttempt naming); Tiers(true): per delay (ByDelay).
	if c.MaxAttempts() != 1 || c.Retries() != 0 || len(c.Plan().Tiers(false)) != 0 || len(c.Plan().Tiers(true)) != 0 {
		t.Errorf("maxAttempts %d, %d retries, tiers %v and %v: want 1, none, none", c.MaxAttempts(), c.Retries(), c.Plan().Tiers(false), c.Plan().Tiers(true))
	}
}
