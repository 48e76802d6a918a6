// Package termsafe escapes text for a terminal: what a dead letter holds (key, value, headers,
// error message, reason, pipeline) was written by a producer or a sink nobody here controls, and
// whatever of it is printed for a person, by the plugin or in the deadletters API's table (which
// kubectl prints), passes through Line or Text so that none of it reaches a terminal as a control
// sequence: not ESC (clear screen, colours, the window title, OSC 52 which writes the clipboard),
// not the C1 controls (U+0080 to U+009F, of which U+009B is CSI on its own), not the bidi controls
// that reorder what is shown. kubectl's own printers (printers.EscapeTerminal) escape only ESC and
// carriage return; these escape every control. The standard library only.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Unsafe reports whether a terminal could act on r rather than show it: the C0 controls, DEL, the
// C1 controls, the bidi embeddings, overrides, isolates and marks, and the line and paragraph
// separators.
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true
	case r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

// Line is s for one line of a table or a description: every unsafe rune, tab and newline too,
// written as Go writes it in a quoted string (\t, \n, \r, \x1b, \u009b, \u202e); bytes that are
// not UTF-8 as \xNN.
func Line(s string) string { return escape(s, false) }

// Text is s for a block of text (a dead letter's value, an error): as Line, but newlines and tabs
// stay.
func Text(s string) string { return escape(s, true) }

func escape(s string, keepLayout bool) string {
	clean := true
	for i, r := range s {
		if Unsafe(r) && (!keepLayout || r != '\n' && r != '\t') || r == utf8.RuneError && isInvalid(s[i:]) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLayout && (r == '\n' || r == '\t'), !Unsafe(r):
			b.WriteString(s[i : i+size])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

func isInvalid(s string) bool {
	r, size := utf8.DecodeRuneInString(s)
	return r == utf8.RuneError && size == 1
}
