package dlqcli

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Every string of a dead letter (key, value, headers, error message, reason, pipeline...) was
// written by a producer or a sink nobody here controls, and so are the names a queue's status counts
// them by. What the plugin prints for a person passes through escapeLine or escapeText, so that none
// of it reaches a terminal as a control sequence: not ESC (clear screen, colours, the window title,
// OSC 52 which writes the clipboard), not the C1 controls (U+0080 to U+009F, of which U+009B is CSI
// on its own), not the bidi controls that reorder what is shown. kubectl's own printers
// (printers.EscapeTerminal) escape only ESC and carriage return; these escape every control.

// terminalUnsafe reports whether a terminal could act on r rather than show it: the C0 controls,
// DEL, the C1 controls, the bidi embeddings, overrides, isolates and marks, and the line and
// paragraph separators.
func terminalUnsafe(r rune) bool {
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

// escapeLine is s for one line of a table or a description: every unsafe rune, tab and newline
// too, written as Go writes it in a quoted string (\t, \n, \r, \x1b, \u009b, \u202e); bytes that
// are not UTF-8 as \xNN.
func escapeLine(s string) string { return escape(s, false) }

// escapeText is s for a block of text (a dead letter's value, an error): as escapeLine, but
// newlines and tabs stay.
func escapeText(s string) string { return escape(s, true) }

func escape(s string, keepLayout bool) string {
	clean := true
	for i, r := range s {
		if terminalUnsafe(r) && (!keepLayout || r != '\n' && r != '\t') || r == utf8.RuneError && isInvalid(s[i:]) {
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
		case keepLayout && (r == '\n' || r == '\t'), !terminalUnsafe(r):
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

// jsonSafe escapes, in JSON text, the runes a terminal acts on that encoding/json leaves as they
// are (DEL, the C1 controls, the bidi controls) as \uXXXX: the same JSON value, as such runes can
// only stand inside its strings, and nothing left for a terminal to act on.
func jsonSafe(b []byte) []byte {
	clean := true
	for _, r := range string(b) {
		if terminalUnsafe(r) && r >= 0x20 {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	for _, r := range string(b) {
		if terminalUnsafe(r) && r >= 0x20 {
			out = fmt.Appendf(out, `\u%04x`, r)
			continue
		}
		out = utf8.AppendRune(out, r)
	}
	return out
}

// warningPrinter prints the API server's warnings on stderr as kubectl does ("Warning: ..."), each
// once, escaped (client-go's own handler logs them through klog as they are).
type warningPrinter struct {
	w    io.Writer
	mu   sync.Mutex
	seen map[string]bool
}

func newWarningPrinter(w io.Writer) *warningPrinter {
	return &warningPrinter{w: w, seen: map[string]bool{}}
}

// HandleWarningHeader implements rest.WarningHandler.
func (p *warningPrinter) HandleWarningHeader(code int, _ string, message string) {
	if code != 299 || message == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[message] {
		return
	}
	p.seen[message] = true
	fmt.Fprintf(p.w, "Warning: %s\n", escapeLine(message))
}
