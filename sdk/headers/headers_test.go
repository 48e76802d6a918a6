package headers_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/retryops/retry-operator/sdk/headers"
)

func TestHeaderNameRoundTrip(t *testing.T) {
	for _, name := range []string{"trace-id", "content-type", "with space", "ünïcode", "a%b", "x:y/z", ""} {
		enc := headers.HeaderName(name)
		if !strings.HasPrefix(enc, headers.HTTPKafkaHeaderPrefix) {
			t.Fatalf("%q -> %q", name, enc)
		}
		for _, c := range enc[len(headers.HTTPKafkaHeaderPrefix):] {
			if c > 0x7e || strings.ContainsRune(" \"(),/:;<=>?@[\\]{}", c) {
				t.Errorf("%q -> %q holds a non-token character %q", name, enc, c)
			}
		}
		dec, ok := headers.DecodeHeaderName(enc[len(headers.HTTPKafkaHeaderPrefix):])
		if !ok || dec != name {
			t.Errorf("%q -> %q -> %q (%v)", name, enc, dec, ok)
		}
	}
}

func TestPlainHeaderValue(t *testing.T) {
	for v, want := range map[string]bool{"": true, "abc": true, "tab\there": true, "é ok": true,
		"\x00": false, "line\nbreak": false, " lead": false, "trail ": false, "\xff\xfe": false, "del\x7f": false} {
		if got := headers.IsPlainHeaderValue([]byte(v)); got != want {
			t.Errorf("IsPlainHeaderValue(%q) = %v", v, got)
		}
	}
}

func TestTruncateMessage(t *testing.T) {
	long := strings.Repeat("é", 600) // 1200 bytes
	got := headers.TruncateMessage(long)
	if len(got) > headers.MaxErrorMessageBytes || !utf8.ValidString(got) || len(got) < headers.MaxErrorMessageBytes-1 {
		t.Errorf("truncated to %d bytes, valid %v", len(got), utf8.ValidString(got))
	}
	if headers.TruncateMessage("short") != "short" {
		t.Error("short message changed")
	}
	if k := headers.IdempotencyKey("orders", 3, 42); k != "orders/3/42" {
		t.Errorf("idempotency key %q", k)
	}
}
