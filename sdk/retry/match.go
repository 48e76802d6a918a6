package retry

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

type matchKind uint8

const (
	matchRegexp   matchKind = iota // run the regexp
	matchContains                  // the pattern is a plain literal: substring search
	matchFold                      // the pattern is a case-folded literal ("(?i)timeout"): folded search
)

// textMatcher matches a message pattern. Most patterns in practice are literals, optionally
// case-insensitive ("(?i)timeout"); Go's regexp engine runs those far slower than a substring
// search, so a literal pattern is matched directly, with exactly the regexp's semantics (the same
// RE2 parse, the same rune decoding of invalid UTF-8, the same simple case folding).
type textMatcher struct {
	re    *regexp.Regexp
	kind  matchKind
	insts int      // the size of re's program, or an upper bound of it (CheckPattern)
	lit   string   // matchContains: the literal
	fold  [][]rune // matchFold: for each rune of the literal, its case-folding orbit
}

// newTextMatcher checks pattern against the budgets (CheckPattern) before it compiles it: the error is
// a *syntax.Error when the pattern is not valid RE2, a *BudgetError when it is above a budget.
func newTextMatcher(pattern string) (textMatcher, error) {
	// regexp.Compile parses with syntax.Perl: parse the same way to check the budget and to recognise
	// a literal.
	tree, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return textMatcher{}, err
	}
	insts, err := checkTree(tree)
	if err != nil {
		return textMatcher{}, err
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return textMatcher{}, err
	}
	m := textMatcher{re: re, insts: insts}
	if tree.Op != syntax.OpLiteral || len(tree.Rune) == 0 || slices.Contains(tree.Rune, utf8.RuneError) {
		return m, nil // not a plain literal: the compiled regexp matches it
	}
	if tree.Flags&syntax.FoldCase == 0 {
		m.kind, m.lit = matchContains, string(tree.Rune)
		return m, nil
	}
	m.kind = matchFold
	for _, r := range tree.Rune {
		orbit := []rune{r}
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			orbit = append(orbit, f)
		}
		m.fold = append(m.fold, orbit)
	}
	return m, nil
}

func (m *textMatcher) match(s string) bool {
	switch m.kind {
	case matchContains:
		return strings.Contains(s, m.lit)
	case matchFold:
		return foldContains(s, m.fold)
	default:
		return m.re.MatchString(s)
	}
}

// foldContains reports whether s contains the folded literal at a rune boundary, decoding s as
// regexp does (an invalid byte is utf8.RuneError of width 1).
func foldContains(s string, lit [][]rune) bool {
	first := lit[0]
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if slices.Contains(first, r) && foldPrefix(s[i+w:], lit[1:]) {
			return true
		}
		i += w
	}
	return false
}

func foldPrefix(s string, lit [][]rune) bool {
	for _, orbit := range lit {
		if s == "" {
			return false
		}
		r, w := utf8.DecodeRuneInString(s)
		if !slices.Contains(orbit, r) {
			return false
		}
		s = s[w:]
	}
	return true
}
