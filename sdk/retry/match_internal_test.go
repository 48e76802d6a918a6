package retry

import "testing"

func TestLiteralPatternsSkipTheRegexpEngine(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		want    matchKind
	}{
		{"a case-insensitive word is a folded literal", `(?i)timeout`, matchFold},
		{"a case-insensitive phrase is a folded literal", `(?i)too many requests`, matchFold},
		{"a plain word is a literal", `ECONNREFUSED`, matchContains},
		{"a quoted literal is a literal", `\Qa.b\E`, matchContains},
		{"word boundaries need the regexp engine", `\b429\b`, matchRegexp},
		{"an alternation needs the regexp engine", `time ?out`, matchRegexp},
		{"an empty pattern needs the regexp engine", ``, matchRegexp},
		{"a literal with the replacement character needs the regexp engine", "a\ufffd", matchRegexp},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := newTextMatcher(tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if m.kind != tc.want {
				t.Errorf("pattern %q: kind %d, want %d", tc.pattern, m.kind, tc.want)
			}
		})
	}
}
