package policy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

func cachePolicy(uid string, generation int64, patterns ...string) *retryv1alpha1.RetryPolicy {
	return &retryv1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "p-" + uid, Namespace: "ns", UID: types.UID(uid), Generation: generation},
		Spec: retryv1alpha1.RetryPolicySpec{
			MaxAttempts: 3,
			Backoff:     retryv1alpha1.Backoff{InitialDelay: metav1.Duration{Duration: time.Second}, MaxDelay: metav1.Duration{Duration: time.Minute}},
			Classification: &retryv1alpha1.Classification{Rules: []retryv1alpha1.ClassificationRule{
				{Name: "transient", Action: retryv1alpha1.ActionRetry, MessagePatterns: append([]string{"(?i)timeout"}, patterns...)},
			}},
		},
	}
}

func mustCompileCached(t *testing.T, c *policy.Cache, rp *retryv1alpha1.RetryPolicy) {
	t.Helper()
	if _, err := c.Compile(rp); err != nil {
		t.Fatal(err)
	}
}

func wantCompilations(t *testing.T, c *policy.Cache, want int64) {
	t.Helper()
	if got := c.Compilations(); got != want {
		t.Fatalf("%d compilations, want %d", got, want)
	}
}

// Many reconciles of an unchanged policy compile it once, concurrent ones included; each new
// generation compiles once more.
func TestCacheCompilesOncePerGeneration(t *testing.T) {
	c := policy.NewCache(0)
	rp := cachePolicy("a", 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if _, err := c.Compile(rp.DeepCopy()); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	wantCompilations(t, c, 1)

	first, _ := c.Compile(rp)
	rp2 := cachePolicy("a", 2, `\b50[0-4]\b`)
	for range 100 {
		mustCompileCached(t, c, rp2)
	}
	wantCompilations(t, c, 2)
	second, _ := c.Compile(rp2)
	if first == second || len(second.Policy().Classification.Rules[0].MessagePatterns) != 2 {
		t.Fatalf("generation 2 returned generation 1's compiled policy")
	}
	if c.Len() != 1 {
		t.Fatalf("%d entries for one policy, want 1 (a new generation replaces the old)", c.Len())
	}

	// A stale read of generation 1 compiles it without evicting generation 2.
	mustCompileCached(t, c, rp)
	mustCompileCached(t, c, rp2)
	wantCompilations(t, c, 3)

	// A policy without a UID is never kept.
	for range 3 {
		mustCompileCached(t, c, cachePolicy("", 1))
	}
	wantCompilations(t, c, 6)
}

// A policy refused for its patterns is refused once per generation too, and the error names the
// pattern.
func TestCacheKeepsErrors(t *testing.T) {
	c := policy.NewCache(4)
	big := "(?:" + strings.Repeat(".", 241) + "){1000}"
	rp := cachePolicy("bad", 7, big)
	for range 50 {
		_, err := c.Compile(rp)
		if err == nil || !strings.Contains(err.Error(), `classification.rules[0].messagePatterns[1] "(?:....`) ||
			!strings.Contains(err.Error(), `(rule "transient")`) {
			t.Fatalf("error %v does not name the rule and pattern", err)
		}
	}
	wantCompilations(t, c, 1)
}

// The cache holds at most its size, dropping the least recently used policy.
func TestCacheIsBounded(t *testing.T) {
	c := policy.NewCache(3)
	for i := range 3 {
		mustCompileCached(t, c, cachePolicy(fmt.Sprint(i), 1))
	}
	mustCompileCached(t, c, cachePolicy("0", 1)) // 0 is now the most recently used
	mustCompileCached(t, c, cachePolicy("3", 1)) // evicts 1
	wantCompilations(t, c, 4)
	if c.Len() != 3 {
		t.Fatalf("%d entries, want 3", c.Len())
	}
	for _, uid := range []string{"0", "2", "3"} {
		mustCompileCached(t, c, cachePolicy(uid, 1))
	}
	wantCompilations(t, c, 4)
	mustCompileCached(t, c, cachePolicy("1", 1))
	wantCompilations(t, c, 5)

	c.Forget("1")
	mustCompileCached(t, c, cachePolicy("1", 1))
	wantCompilations(t, c, 6)
	for i := range 1000 {
		mustCompileCached(t, c, cachePolicy(fmt.Sprint("many-", i), 1))
	}
	if c.Len() != 3 {
		t.Fatalf("%d entries after 1000 policies, want 3", c.Len())
	}
}

// Every sample's message patterns are far within the budgets (budget.go's rationale rests on it).
func TestSamplesAreWithinThePatternBudgets(t *testing.T) {
	for _, name := range []string{"chatbot", "grading", "delegation", "documents", "generic-worker"} {
		p := loadSample(t, name).Policy()
		total := 0
		for _, r := range p.Classification.Rules {
			for _, pat := range r.MessagePatterns {
				n, err := retry.CheckPattern(pat)
				if err != nil || n > retry.MaxPatternInstructions/10 {
					t.Errorf("%s: %q: %d instructions, %v", name, pat, n, err)
				}
				total += n
			}
		}
		if total > retry.MaxPolicyInstructions/10 {
			t.Errorf("%s: patterns compile to %d instructions in all", name, total)
		}
		t.Logf("%s: %d instructions of patterns", name, total)
	}
}

// The API documents the budgets the retry core enforces.
func TestTheAPIDocumentsThePatternBudgets(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "crd", "bases", "retry.retryops.dev_retrypolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(string(data)), " ")
	for _, want := range []string{
		fmt.Sprintf("a pattern may compile to at most %d instructions", retry.MaxPatternInstructions),
		fmt.Sprintf("all of a policy's patterns to at most %d.", retry.MaxPolicyInstructions),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the RetryPolicy CRD does not say %q", want)
		}
	}
}
