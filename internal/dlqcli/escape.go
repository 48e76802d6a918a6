package dlqcli

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/retryops/retry-operator/internal/termsafe"
)

// Every string of a dead letter (key, value, headers, error message, reason, pipeline...) was
// written by a producer or a sink nobody here controls, and so are the names a queue's status counts
// them by. What the plugin prints for a person passes through escapeLine or escapeText
// (internal/termsafe, which the deadletters API's table uses too).

func terminalUnsafe(r rune) bool { return termsafe.Unsafe(r) }

// escapeLine is s for one line of a table or a description (termsafe.Line).
func escapeLine(s string) string { return termsafe.Line(s) }

// escapeText is s for a block of text, newlines and tabs kept (termsafe.Text).
func escapeText(s string) string { return termsafe.Text(s) }

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
