package dispatcher

import (
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// failureText is a sink's error type or message as the policy matches it and the records carry
// it, read the same way from a single answer (Retryops-Error-Type, the body) and from a batch
// result (errorType, message), so that one answer is classified alike either way: each byte that
// is not valid UTF-8 becomes U+FFFD, as it does in a JSON string decoded; the text is cut to at
// most limit bytes on a UTF-8 boundary (limit < 0: whole); then white space is trimmed from both
// ends. Control characters are kept: a pattern's \s matches a tab or a newline inside.
//
// The cut text is the same whether s is the whole text or only its first limit+utf8.UTFMax-1
// bytes (all a single answer's body is read of), since a rune starting before the cut is whole in
// that much.
func failureText(s string, limit int) string {
	if !utf8.ValidString(s) {
		var b strings.Builder
		b.Grow(len(s) + 16)
		for i := 0; i < len(s) && (limit < 0 || b.Len() <= limit); {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b.WriteRune(utf8.RuneError)
			} else {
				b.WriteString(s[i : i+n])
			}
			i += n
		}
		s = b.String()
	}
	if limit >= 0 && len(s) > limit {
		n := limit
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return strings.TrimSpace(s)
}

// failureMessage is the message a failure is matched and recorded with: its first
// maxMessageRead bytes (failureText), or the status and its standard text when that is empty.
// The status line's own reason phrase is not used: HTTP/2 has none and a batch result cannot give
// one, so the same status reads the same over HTTP/1.1, HTTP/2 and in a batch.
func failureMessage(raw string, status int) string {
	if msg := failureText(raw, maxMessageRead); msg != "" || status == 0 {
		return msg
	}
	if text := http.StatusText(status); text != "" {
		return strconv.Itoa(status) + " " + text
	}
	return strconv.Itoa(status)
}

// failureErrorType is the error type a failure is matched with, whole (failureText): a rule names
// an error type exactly. The records carry its first headers.MaxErrorTypeBytes bytes
// (headers.TruncateErrorType), alone and in a batch alike.
func failureErrorType(raw string) string { return failureText(raw, -1) }

// maxMessageKeep is how much of a failure's body is kept to read its message from: a rune that
// starts within the first maxMessageRead bytes is whole in it.
const maxMessageKeep = maxMessageRead + utf8.UTFMax - 1
