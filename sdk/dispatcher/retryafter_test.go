package dispatcher

import (
	"strings"
	"testing"
	"time"
)

// TestParseRetryAfterHostile: a sink's Retry-After is a delay in 0..maxRetryAfter whatever it says:
// never negative (NaN is not a delay), and a wait beyond maxRetryAfter, as seconds or as a date,
// is maxRetryAfter (the policy's retryAfter.maxDelay then caps it), not ignored: before, "a year
// and a second" in seconds meant no Retry-After at all (the record retried on its backoff, sooner
// than the sink asked) while a date ten years on was honoured.
func TestParseRetryAfterHostile(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"5", 5 * time.Second},
		{" 5 ", 5 * time.Second},
		{"1.5", 1500 * time.Millisecond},
		{"0", 0},
		{"-5", 0},
		{"-0", 0},
		{"NaN", 0},
		{"-Inf", 0},
		{"abc", 0},
		{"31536000", year},
		{"31536001", year},
		{"9223372036854775808", year},
		{"Inf", year},
		{strings.Repeat("9", 400), year},
		{"Mon, 23 Nov 2026 12:00:10 GMT", 10 * time.Second},
		{"Mon, 23 Nov 2026 11:00:00 GMT", 0},
		{"Fri, 31 Dec 9999 23:59:59 GMT", year},
		{"Sun, 06 Nov 1994 08:49:37 GMT", 0},
		{"Mon, 23 Nov 2026 12:00:10 +0900", 0}, // not an HTTP date
		{strings.Repeat("x", 1<<20), 0},
	} {
		if got := parseRetryAfter(c.in, now); got != c.want {
			t.Errorf("parseRetryAfter(%.40q) = %v, want %v", c.in, got, c.want)
		}
	}
}
