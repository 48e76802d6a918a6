package retry_test

import (
	"errors"
	"regexp"
	"regexp/syntax"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/sdk/retry"
)

// compiledSize is len(prog.Inst) of the program regexp.Compile builds for pattern.
func compiledSize(t *testing.T, pattern string) int {
	t.Helper()
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		t.Fatalf("%q: %v", pattern, err)
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		t.Fatalf("%q: %v", pattern, err)
	}
	return len(prog.Inst)
}

// FuzzPatternBudget: for any input the check never panics; it refuses exactly what regexp.Compile
// refuses as invalid (with the same error); what it accepts compiles within MaxPatternInstructions,
// to no more instructions than it counted; what it refuses for its size really compiles above the
// budget (checked by compiling it when that is cheap).
func FuzzPatternBudget(f *testing.F) {
	for _, p := range []string{
		`(?i)timeout`, `\b50[0-4]\b`, `(?i)timed? ?out`, ``, `(?i`, `(?:.{241}){1000}`, bigPattern,
		`.{0,1000}`, `(?:a*)*`, `(?:(?:a*)*){1000}`, `(?:a?){1000}`, `(?:\b|x){0,999}`, `(?:){500}`,
		`[^\x00-\x{10FFFF}]{1000}`, `(?s).{1000}.{1000}`, `(a|b|cc|(?:)){3,}`, `(?U)a{2,}?b*?`, `\Qa.b\E{2,5}`,
		`(?:(?:a{10}){10}){10}`, `x{0}{0}`, `(?:x{0,})*`, `(?i)\pL{1,1000}`, strings.Repeat(`a{1000}`, 3),
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, pattern string) {
		if len(pattern) > 1024 {
			return // four times what the API allows: longer inputs only slow the minimizer down
		}
		n, err := retry.CheckPattern(pattern)
		var budget *retry.BudgetError
		if errors.As(err, &budget) {
			// The pattern parsed (regexp.Compile accepts it): check the refusal is right.
			if budget.Repeat > 0 {
				if budget.Repeat <= retry.MaxPatternRepeat {
					t.Fatalf("%q: refused for %d nested copies, within the budget", pattern, budget.Repeat)
				}
				return
			}
			if budget.Instructions > 4*retry.MaxPatternInstructions {
				return // far above the budget: too costly to compile here (the seeds check some)
			}
			if exact := compiledSize(t, pattern); exact <= retry.MaxPatternInstructions || (!budget.Estimated && int64(exact) != budget.Instructions) {
				t.Fatalf("%q: refused as %v, compiles to %d instructions", pattern, err, exact)
			}
			return
		}
		_, reErr := regexp.Compile(pattern)
		switch {
		case reErr != nil:
			if err == nil || err.Error() != reErr.Error() {
				t.Fatalf("%q: regexp.Compile says %v, CheckPattern %v", pattern, reErr, err)
			}
		case err == nil:
			if n < 1 || n > retry.MaxPatternInstructions {
				t.Fatalf("%q: accepted with %d instructions, the budget is %d", pattern, n, retry.MaxPatternInstructions)
			}
			if exact := compiledSize(t, pattern); exact > n {
				t.Fatalf("%q: counted %d instructions, compiles to %d", pattern, n, exact)
			}
		default:
			t.Fatalf("%q: regexp.Compile accepts it, CheckPattern says %v (%T)", pattern, err, err)
		}
	})
}
