package retry_test

import (
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

// bigPattern is the pathological pattern as Go 1.26 still accepts it: 241 dots repeated 1000 times,
// 251 characters (within the API's 256). It compiles to 241,002 instructions, about 53 MB per compile.
// The shorthand `(?:.{241}){1000}` nests two repeats (241 x 1000 copies), which
// regexp/syntax itself refuses ("invalid repeat count") since Go caps nested repeats at 1000 copies.
var bigPattern = "(?:" + strings.Repeat(".", 241) + "){1000}"

// budgetPolicy is a valid policy whose rules carry the given message patterns, one rule per slice.
func budgetPolicy(rules ...[]string) retry.Policy {
	p := retry.Policy{
		MaxAttempts: 3,
		Backoff:     retry.Backoff{InitialDelay: time.Second, Multiplier: "2", MaxDelay: time.Minute},
	}
	for i, pats := range rules {
		p.Classification.Rules = append(p.Classification.Rules, retry.Rule{
			Name: fmt.Sprintf("rule-%d", i), Action: retry.ActionRetry, MessagePatterns: pats})
	}
	return p
}

func fieldErrors(t *testing.T, err error) []*retry.FieldError {
	t.Helper()
	var verr *retry.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v (%T) is not a *retry.ValidationError", err, err)
	}
	return verr.Errors
}

// The pattern is refused, with a message naming the rule, the field and the pattern.
func TestPatternAboveTheInstructionBudgetIsRefused(t *testing.T) {
	_, err := retry.Compile(budgetPolicy([]string{"(?i)timeout"}, []string{"(?i)econnrefused"}, []string{"x", bigPattern}))
	if err == nil {
		t.Fatalf("a pattern compiling to 241002 instructions (about 53 MB per compile) was accepted")
	}
	fes := fieldErrors(t, err)
	if len(fes) != 1 {
		t.Fatalf("want one field error, got %v", err)
	}
	fe := fes[0]
	if fe.Field != "classification.rules[2].messagePatterns[1]" || fe.Rule != "rule-2" {
		t.Errorf("field error names %s (rule %q), want classification.rules[2].messagePatterns[1] (rule \"rule-2\")", fe.Field, fe.Rule)
	}
	msg := fe.Error()
	for _, want := range []string{
		`classification.rules[2].messagePatterns[1] "(?:.....`, `(rule "rule-2")`,
		"compiles to about 241002 instructions", fmt.Sprintf("the budget of %d per pattern", retry.MaxPatternInstructions),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
	if len(msg) > 400 {
		t.Errorf("message is %d bytes long, the quoted pattern is not bounded: %s", len(msg), msg)
	}
}

// The shorthand nests repeats beyond 1000 copies: refused too, naming it.
func TestNestedRepeatsAreRefused(t *testing.T) {
	for _, pat := range []string{`(?:.{241}){1000}`, `(?:(?:a{10}){10}){11}`, `(?:\b{2}){1000}`} {
		_, err := retry.Compile(budgetPolicy([]string{pat}))
		if err == nil {
			t.Errorf("%q: accepted", pat)
			continue
		}
		fes := fieldErrors(t, err)
		if len(fes) != 1 || fes[0].Field != "classification.rules[0].messagePatterns[0]" || !strings.Contains(fes[0].Error(), fmt.Sprintf("%q", pat)) {
			t.Errorf("%q: %v", pat, err)
		}
	}
}

// Patterns that repeat within the budgets pass, and their costs are what regexp compiles to.
func TestPatternsWithinTheBudgetsCompile(t *testing.T) {
	for _, pat := range []string{
		`(?i)timeout`, `\b50[0-4]\b`, `(?i)timed? ?out`, `.{0,500}`, `(?:(?:a{10}){10}){10}`,
		`[\p{L}\p{N}]{1000}`, `(?i)` + strings.Repeat("x", 250), `(?i)(?:` + strings.Repeat("ab|", 80) + `cd)`,
	} {
		if _, err := retry.Compile(budgetPolicy([]string{pat})); err != nil {
			t.Errorf("%q: %v", pat, err)
		}
	}
}

// A policy's patterns share a budget: each pattern is within its own, all of them together are not.
func TestPolicyAbovePatternBudgetIsRefused(t *testing.T) {
	pat := ".{" + fmt.Sprint(retry.MaxPatternInstructions-2) + "}" // exactly the per-pattern budget
	if retry.MaxPatternInstructions-2 > 1000 {
		pat = "(?:.{1000})" + ".{" + fmt.Sprint(retry.MaxPatternInstructions-1002) + "}"
	}
	n := retry.MaxPolicyInstructions/retry.MaxPatternInstructions + 1
	rules := make([][]string, n)
	for i := range rules {
		rules[i] = []string{pat}
	}
	if _, err := retry.Compile(budgetPolicy(rules[:n-1]...)); err != nil {
		t.Fatalf("%d patterns at the budget: %v", n-1, err)
	}
	_, err := retry.Compile(budgetPolicy(rules...))
	if err == nil {
		t.Fatalf("%d patterns of %d instructions each were accepted", n, retry.MaxPatternInstructions)
	}
	fes := fieldErrors(t, err)
	if len(fes) != 1 || fes[0].Field != "classification.rules" {
		t.Fatalf("want one error on classification.rules, got %v", err)
	}
	msg := fes[0].Error()
	for _, want := range []string{
		fmt.Sprintf("the budget of %d per policy", retry.MaxPolicyInstructions),
		`classification.rules[0] ("rule-0").messagePatterns[0]`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not contain %q", msg, want)
		}
	}
}

// allocated returns the bytes f allocates, and the bytes still live after it when keep holds f's
// result.
func allocated(f func() any) (alloc, retained uint64) {
	var before, after, kept runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	v := f()
	runtime.ReadMemStats(&after)
	runtime.GC()
	runtime.ReadMemStats(&kept)
	runtime.KeepAlive(v)
	return after.TotalAlloc - before.TotalAlloc, kept.HeapAlloc - min(kept.HeapAlloc, before.HeapAlloc)
}

// The rationale of the budgets (budget.go), measured: what compiling costs per instruction, what the
// worst patterns and policies within the budgets allocate and keep, and what the pattern
// allocated before the budget.
func TestPatternBudgetMemory(t *testing.T) {
	if raceEnabled || testing.Short() {
		t.Skip("allocation figures are meaningless under the race detector")
	}
	const mb = 1 << 20
	// Patterns at the per-pattern budget: the most instructions per character, the largest
	// character classes, anchored (one-pass programs keep a second copy), alternations.
	worst := []string{
		`(?:.{1000}).{998}`, `.{0,999}`, `^[\p{L}\p{N}]{1000}[\p{L}\p{N}]{996}$`, `(?i)^(?:[\pL\pN\pP\pS]{1,10}){100}x{94}$`,
		`(?:ab|cd|ef|gh|ij|kl|mn){99}`, `^(?:(?:\w+){1,6}){100}x{296}$`,
	}
	var worstAlloc, worstKept uint64
	for _, pat := range worst {
		n, err := retry.CheckPattern(pat)
		if err != nil || n < retry.MaxPatternInstructions*9/10 {
			t.Fatalf("%q is not at the budget: %d instructions, %v", pat, n, err)
		}
		a, k := allocated(func() any { return regexp.MustCompile(pat) })
		t.Logf("%-48q %5d instructions: compiling allocates %7d bytes (%3d per instruction), keeps %6d", pat, n, a, a/uint64(n), k)
		worstAlloc, worstKept = max(worstAlloc, a), max(worstKept, k)
	}
	if worstAlloc > 1*mb || worstKept > mb/2 {
		t.Errorf("a pattern within the budget allocates %d bytes and keeps %d; budget.go says about 0.5 MB and 0.1 MB", worstAlloc, worstKept)
	}

	// A policy at the policy budget, of the most costly patterns.
	var rules [][]string
	for i := range retry.MaxPolicyInstructions / retry.MaxPatternInstructions {
		rules = append(rules, []string{worst[i%len(worst)]})
	}
	a, k := allocated(func() any {
		c, err := retry.Compile(budgetPolicy(rules...))
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	t.Logf("a policy at the budget of %d instructions: compiling allocates %d bytes, keeps %d", retry.MaxPolicyInstructions, a, k)
	if a > 5*mb || k > 2*mb {
		t.Errorf("a policy within the budget allocates %d bytes and keeps %d; budget.go says about 2.5 MB and 0.5 MB", a, k)
	}

	// The pattern: what regexp.Compile allocates for it, and what the refusal costs.
	a, _ = allocated(func() any { return regexp.MustCompile(bigPattern) })
	t.Logf("%.20q... compiled: allocates %d bytes", bigPattern, a)
	if a < 20*mb {
		t.Errorf("the issue's pattern allocates only %d bytes to compile", a)
	}
	a, _ = allocated(func() any { _, err := retry.CheckPattern(bigPattern); return err })
	t.Logf("%.20q... refused: allocates %d bytes", bigPattern, a)
	if a > 256<<10 {
		t.Errorf("refusing the issue's pattern allocates %d bytes", a)
	}
}
