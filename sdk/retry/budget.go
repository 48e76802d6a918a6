package retry

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode/utf8"
)

// Budgets of message patterns. A RetryPolicy comes from a tenant, and its patterns are compiled by the
// operator (for status, for every pipeline that uses the policy) and by every dispatcher: the size of
// what they compile to must be bounded before anything compiles them. The API bounds a pattern to 256
// characters, but 251 of them ("(?:" + 241 dots + "){1000}") ask for a program of 241,002
// instructions: regexp.Compile allocates 55.7 MB for it (measured with Go 1.26; refusing it with
// CheckPattern allocates about 55 KB). The shorthand for it, "(?:.{241}){1000}", nests
// repeats to 241,000 copies, which regexp/syntax itself refuses ("invalid repeat count").
//
// Measured by TestPatternBudgetMemory (Go 1.26, amd64): compiling allocates 125 to 245 bytes per
// instruction and a compiled pattern keeps 25 to 55 bytes per instruction (character classes share
// their ranges between copies; anchored one-pass programs cost the most). The worst patterns at
// MaxPatternInstructions allocate at most 0.49 MB while they compile and keep at most 0.11 MB; a
// policy at MaxPolicyInstructions of such patterns allocates 2.0 MB and keeps 0.48 MB. Every pattern
// in config/samples/, the seeds and the tests compiles to fewer than 30 instructions (a
// case-insensitive word is its length plus 2; the largest sample policy has 161 in all), and a
// 250-character literal to 252: the budgets leave room for patterns far larger than any in use, and
// refuse what would cost a manager with the smallest advised limit (256Mi) more than a few MB per policy.
const (
	// MaxPatternInstructions bounds the program one message pattern compiles to: len(prog.Inst) of
	// regexp/syntax.Compile, as regexp.Compile builds it.
	MaxPatternInstructions = 2000
	// MaxPolicyInstructions bounds the programs of all of a policy's message patterns together.
	MaxPolicyInstructions = 10000
	// MaxPatternRepeat bounds the copies that nested repeats make of what they repeat: the product of
	// the counts of the repeats around any part of a pattern ("(?:(?:x{10}){10}){10}" makes 1000 copies
	// of x). regexp/syntax refuses the same products above 1000 itself ("invalid repeat count"); the
	// check keeps the bound whatever the parser does.
	MaxPatternRepeat = 1000

	// exactLimit is the largest estimate for which a pattern above the budget is compiled (at most
	// about 2 MB) to count its instructions exactly, so that an estimate never refuses a pattern
	// that compiles within the budget. Patterns estimated above it are refused without compiling.
	exactLimit = 4 * MaxPatternInstructions
	// maxQuotedPattern bounds how much of a pattern an error message quotes.
	maxQuotedPattern = 80
)

// BudgetError says that a message pattern is above a budget. It is what CheckPattern returns for a
// pattern that parses but compiles to too large a program.
type BudgetError struct {
	// Repeat is the product of the nested repeat counts, when it is above MaxPatternRepeat, or 0.
	Repeat int64
	// Instructions is the size of the program the pattern compiles to, when Repeat is 0.
	Instructions int64
	// Estimated says that Instructions is the parse tree's estimate, an upper bound that is exact
	// for most patterns, because the pattern was too far above the budget to compile it.
	Estimated bool
}

// Error says which budget the pattern is above, for example
//
//	compiles to about 241002 instructions, above the budget of 2000 per pattern
func (e *BudgetError) Error() string {
	if e.Repeat > 0 {
		return fmt.Sprintf("nests repeats to %d copies of what they repeat, above the budget of %d per pattern", e.Repeat, MaxPatternRepeat)
	}
	about := ""
	if e.Estimated {
		about = "about "
	}
	return fmt.Sprintf("compiles to %s%d instructions, above the budget of %d per pattern", about, e.Instructions, MaxPatternInstructions)
}

// CheckPattern parses a message pattern as regexp.Compile does (RE2 syntax with Perl flags) and checks
// it against the per-pattern budgets before anything compiles it. It returns the number of
// instructions the pattern compiles to (an upper bound, exact for most patterns; at most
// MaxPatternInstructions), a *syntax.Error when it does not parse (the error regexp.Compile would
// return), or a *BudgetError when it is above a budget.
func CheckPattern(pattern string) (int, error) {
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	return checkTree(tree)
}

// checkTree checks a pattern parsed with syntax.Perl; see CheckPattern.
func checkTree(tree *syntax.Regexp) (int, error) {
	if r := repeatProduct(tree, 1); r > MaxPatternRepeat {
		return 0, &BudgetError{Repeat: r}
	}
	est, _ := progSize(tree)
	est += 2 // the program's fail and match instructions
	if est <= MaxPatternInstructions {
		return int(est), nil
	}
	if est > exactLimit {
		return 0, &BudgetError{Instructions: est, Estimated: true}
	}
	prog, err := syntax.Compile(tree.Simplify())
	if err != nil {
		return 0, err
	}
	if n := len(prog.Inst); n <= MaxPatternInstructions {
		return n, nil
	}
	return 0, &BudgetError{Instructions: int64(len(prog.Inst))}
}

// repeatProduct returns the largest product of nested repeat counts in re, outer counts multiplied
// by in (the count of a repeat is its maximum, or its minimum when it has none). It saturates above
// MaxPatternRepeat.
func repeatProduct(re *syntax.Regexp, in int64) int64 {
	if re.Op == syntax.OpRepeat {
		n := int64(re.Max)
		if n < 0 {
			n = int64(re.Min)
		}
		if n == 0 {
			return in // x{0} matches the empty string and compiles none of x
		}
		in = min(in*n, MaxPatternRepeat+1)
	}
	out := in
	for _, sub := range re.Sub {
		out = max(out, repeatProduct(sub, in))
	}
	return out
}

// progSize estimates, from the parse tree, the instructions syntax.Compile emits for re once
// simplified (without the program's own fail and match instructions), and whether re can match the
// empty string. It follows regexp/syntax's simplify and compile: a repeat x{n,m} is n copies of x and
// m-n nested optional copies, x* takes one instruction more than x, or two when x can match the
// empty string, a capture two, an alternation of k parts k-1. Where Simplify would shorten the tree
// further (x** to x*) the estimate is larger than the program, never smaller: the fuzz test checks
// it. The sizes are bounded by the parser's own limit on program size, far from overflowing.
func progSize(re *syntax.Regexp) (int64, bool) {
	switch re.Op {
	case syntax.OpNoMatch:
		return 0, false
	case syntax.OpEmptyMatch:
		return 1, true
	case syntax.OpLiteral:
		if len(re.Rune) == 0 {
			return 1, true
		}
		return int64(len(re.Rune)), false
	case syntax.OpCharClass, syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 1, false
	case syntax.OpCapture:
		n, nullable := progSize(re.Sub[0])
		return n + 2, nullable
	case syntax.OpStar:
		n, nullable := progSize(re.Sub[0])
		return star(n, nullable), true
	case syntax.OpPlus:
		n, nullable := progSize(re.Sub[0])
		return n + 1, nullable
	case syntax.OpQuest:
		n, _ := progSize(re.Sub[0])
		return n + 1, true
	case syntax.OpConcat:
		if len(re.Sub) == 0 {
			return 1, true
		}
		var total int64
		all := true
		for _, sub := range re.Sub {
			n, nullable := progSize(sub)
			total += n
			all = all && nullable
		}
		return total, all
	case syntax.OpAlternate:
		total := int64(max(len(re.Sub)-1, 0))
		anyNullable := false
		for _, sub := range re.Sub {
			n, nullable := progSize(sub)
			total += n
			anyNullable = anyNullable || nullable
		}
		return total, anyNullable
	case syntax.OpRepeat:
		return repeatSize(re)
	default: // empty-width assertions: ^ $ \A \z \b \B
		return 1, true
	}
}

// star is the size of x* for an x of n instructions: a loop, or (x+)? when x can match empty.
func star(n int64, nullable bool) int64 {
	if nullable {
		return n + 2
	}
	return n + 1
}

// repeatSize is progSize of x{min,max}, as Simplify rewrites it: x{0} is empty, x{0,} is x*, x{1,} is
// x+, x{n,} is n-1 copies of x and x+, x{1} is x, x{n,m} is n copies of x and m-n nested (x)?.
func repeatSize(re *syntax.Regexp) (int64, bool) {
	lo, hi := int64(re.Min), int64(re.Max)
	if lo == 0 && hi == 0 {
		return 1, true
	}
	n, nullable := progSize(re.Sub[0])
	switch {
	case hi < 0 && lo == 0:
		return star(n, nullable), true
	case hi < 0:
		return lo*n + 1, nullable
	case hi < lo:
		return 0, false // cannot parse; Simplify makes it no match
	default:
		return lo*n + (hi-lo)*(n+1), nullable || lo == 0
	}
}

// patternCost is one accepted message pattern's share of the policy budget.
type patternCost struct {
	rule, pattern int
	name          string
	insts         int
}

// checkPolicyBudget refuses a policy whose accepted message patterns compile to more than
// MaxPolicyInstructions together, naming the largest of them.
func checkPolicyBudget(v *validator, costs []patternCost) {
	total := 0
	for _, c := range costs {
		total += c.insts
	}
	if total <= MaxPolicyInstructions {
		return
	}
	costs = slices.Clone(costs)
	slices.SortStableFunc(costs, func(a, b patternCost) int { return b.insts - a.insts })
	var largest []string
	for _, c := range costs[:min(3, len(costs))] {
		largest = append(largest, fmt.Sprintf("classification.rules[%d] (%q).messagePatterns[%d] (%d)", c.rule, c.name, c.pattern, c.insts))
	}
	v.add("classification.rules", nil,
		"hold message patterns that compile to %d instructions in all, above the budget of %d per policy; the largest: %s",
		total, MaxPolicyInstructions, strings.Join(largest, ", "))
}

// quotePattern bounds the part of a pattern an error message quotes: its first maxQuotedPattern
// bytes (whole runes) and "...".
func quotePattern(p string) string {
	if len(p) <= maxQuotedPattern {
		return p
	}
	cut := maxQuotedPattern
	for cut > 0 && !utf8.RuneStart(p[cut]) {
		cut--
	}
	return p[:cut] + "..."
}
