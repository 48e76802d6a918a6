package batch

import (
	"encoding/base64"
	"strconv"
	"time"
	"unicode/utf8"
)

// RequestOverhead is the bytes of a request document besides its records (EncodeRequest's
// envelope and final newline).
var RequestOverhead = len(`{"version":"` + Version + `","records":[]}` + "\n")

// EncodedSize is an upper bound of the bytes r takes in a request document, the comma that
// separates it from the next record included, computed without encoding it: a request's size is
// at most RequestOverhead plus its records' EncodedSize. It is exact but for a control character
// in a string (counted as the six bytes of \u00XX, which \n and a few others take fewer of).
func (r *Record) EncodedSize() int {
	n := 2 // the braces; the comma after the record stands for its last field's, absent
	n += fieldSize("id", stringSize(r.ID))
	n += fieldSize("idempotencyKey", stringSize(r.IdempotencyKey))
	n += fieldSize("attempt", intSize(int64(r.Attempt)))
	n += fieldSize("topic", stringSize(r.Topic))
	n += fieldSize("partition", intSize(int64(r.Partition)))
	n += fieldSize("offset", intSize(r.Offset))
	n += fieldSize("timestamp", timeSize(r.Timestamp))
	n += fieldSize("key", bytesSize(r.RawKey))
	n += fieldSize("value", bytesSize(r.RawValue))
	n += fieldSize("headers", 2) // counted even when absent: an upper bound
	for i, h := range r.Headers {
		n += HeaderSize(h.Key, h.Value)
		if i > 0 {
			n++ // the comma before it
		}
	}
	if r.FirstFailure != nil {
		n += fieldSize("firstFailure", timeSize(*r.FirstFailure))
	}
	if r.ReplayOf != "" {
		n += fieldSize("replayOf", stringSize(r.ReplayOf))
	}
	if r.ReplayCount != 0 {
		n += fieldSize("replayCount", intSize(int64(r.ReplayCount)))
	}
	if r.DeliveredFrom != "" {
		n += fieldSize("deliveredFrom", stringSize(r.DeliveredFrom))
	}
	return n
}

// HeaderSize is the bytes a header takes in a record's headers, as EncodedSize counts them:
// without the comma between two headers.
func HeaderSize(key string, value []byte) int {
	n := len(`{"key":}`) + stringSize(key)
	if value != nil {
		n += 1 + bytesFieldsSize(value) // the comma, then "text":... or "base64":...
	}
	return n
}

// fieldSize is the bytes of "name":value and its comma.
func fieldSize(name string, value int) int { return len(name) + 4 + value }

// bytesSize is the bytes of a Bytes value: null, {"text":...} or {"base64":...}.
func bytesSize(b []byte) int {
	if b == nil {
		return len("null")
	}
	return 2 + bytesFieldsSize(b)
}

// bytesFieldsSize is the bytes of "text":"..." or "base64":"...".
func bytesFieldsSize(b []byte) int {
	// One pass: the size as text, given up at the first invalid byte (string(b) would copy a
	// large value).
	if n, valid := textSize(b); valid {
		return len(`"text":`) + n
	}
	return len(`"base64":""`) + base64.StdEncoding.EncodedLen(len(b))
}

// textSize is jsonSize of valid UTF-8 b, and false at b's first invalid byte.
func textSize(b []byte) (int, bool) {
	n := 2
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			n += asciiSize(c)
			i++
			continue
		}
		r, w := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && w == 1:
			return 0, false
		case r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += w
		}
		i += w
	}
	return n, true
}

// asciiSize is the bytes encoding/json writes for an ASCII byte in a string.
func asciiSize(c byte) int {
	switch {
	case c < 0x20, c == '<', c == '>', c == '&':
		return 6
	case c == '"', c == '\\':
		return 2
	}
	return 1
}

// stringSize is the bytes of s as a JSON string encoding/json writes: quoted, with <, > and &,
// U+2028, U+2029 and every invalid byte written as six bytes, a quote and a backslash as two and
// any other control character counted as six.
func stringSize(s string) int { return jsonSize(s, utf8.DecodeRuneInString) }

func jsonSize[S string | []byte](s S, decode func(S) (rune, int)) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			n += asciiSize(c)
			i++
			continue
		}
		r, w := decode(s[i:])
		switch {
		case r == utf8.RuneError && w == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += w
		}
		i += w
	}
	return n
}

func intSize(v int64) int {
	var buf [24]byte
	return len(strconv.AppendInt(buf[:0], v, 10))
}

func timeSize(t time.Time) int {
	if y := t.UTC().Year(); y >= 0 && y <= 9999 {
		return len("2006-01-02T15:04:05.000Z") + 2 // in UTC, Z07:00 is Z
	}
	var buf [64]byte
	return len(t.UTC().AppendFormat(buf[:0], TimestampLayout)) + 2
}
