package headers_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/headers"
)

func TestReplayOfRoundTrip(t *testing.T) {
	long := strings.Repeat("t", headers.MaxTopicNameBytes)
	for _, c := range []struct {
		topic     string
		partition int32
		offset    int64
	}{{"orders.dlq", 0, 0}, {"a", 2147483647, 9223372036854775807}, {long, 2147483647, 9223372036854775807}, {"x_y-z.1", 3, 42}} {
		s := headers.FormatReplayOf(c.topic, c.partition, c.offset)
		if len(s) > headers.MaxReplayOfBytes {
			t.Errorf("%q: %d bytes", s, len(s))
		}
		topic, p, o, err := headers.ParseReplayOf(s)
		if err != nil || topic != c.topic || p != c.partition || o != c.offset {
			t.Errorf("%q -> %q %d %d %v", s, topic, p, o, err)
		}
	}
}

func TestParseReplayOfRejects(t *testing.T) {
	for _, s := range []string{"", "garbage", "a/1", "/0/1", "a b/0/1", "./0/1", "../0/1", "a/b/0/1", "a/-1/0", "a/0/-1",
		"a/+1/0", "a/01/0", "a/0/00", "a/2147483648/0", "a/0/9223372036854775808", "a/0/1 ", "a/0/", "a//0",
		"é/0/1", strings.Repeat("t", 250) + "/0/1", strings.Repeat("x", 10000), "a/0/1\x00", "a/0/0x10"} {
		if topic, p, o, err := headers.ParseReplayOf(s); err == nil {
			t.Errorf("ParseReplayOf(%.40q) = %q %d %d, want an error", s, topic, p, o)
		}
	}
}

func TestParseReplayCount(t *testing.T) {
	for s, want := range map[string]int{"1": 1, "3": 3, "100": 100} {
		if n, err := headers.ParseReplayCount(s); err != nil || n != want {
			t.Errorf("ParseReplayCount(%q) = %d, %v", s, n, err)
		}
	}
	for _, s := range []string{"", "0", "101", "-1", "+1", "01", "9223372036854775808", "18446744073709551616", "1e2", " 1", "abc", strings.Repeat("9", 5000)} {
		if n, err := headers.ParseReplayCount(s); err == nil {
			t.Errorf("ParseReplayCount(%.40q) = %d, want an error", s, n)
		}
	}
}

// deadLetterHeaders is what the dispatcher writes on a dead letter of orders/0/42, replayed count
// times before (0: never).
func deadLetterHeaders(count int) []headers.Header {
	h := func(k, v string) headers.Header { return headers.Header{Key: k, Value: []byte(v)} }
	hs := []headers.Header{
		h("trace-id", "abc"), h("content-type", "application/json"),
		h(headers.OriginalTopic, "orders"), h(headers.OriginalPartition, "0"), h(headers.OriginalOffset, "42"),
		h(headers.OriginalTimestamp, "2026-01-02T03:04:05.000000006Z"),
		h(headers.ConsumerGroup, "g"), h(headers.Pipeline, "ns/p"), h(headers.Attempts, "3"),
		h(headers.FirstFailure, "2026-01-02T03:04:06Z"), h(headers.ErrorType, "HTTP503"), h(headers.Reason, headers.ReasonMaxRetriesExceeded),
		h("trace-id", "second"),
	}
	if count > 0 {
		hs = append(hs, h(headers.ReplayOf, "orders.dlq/0/7"), h(headers.ReplayCount, strconv.Itoa(count)))
	}
	return hs
}

func TestReplayHeaders(t *testing.T) {
	now := time.Date(2026, 11, 23, 15, 0, 0, 5, time.UTC)
	got, err := headers.ReplayHeaders(deadLetterHeaders(0), "orders.dlq", 1, 99, now)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, h := range got {
		b.WriteString(h.Key + "=" + string(h.Value) + "\n")
	}
	want := "trace-id=abc\ncontent-type=application/json\ntrace-id=second\n" +
		"retryops.replay.of=orders.dlq/1/99\nretryops.replay.count=1\nretryops.pipeline=ns/p\n" +
		"retryops.original.topic=orders\nretryops.original.partition=0\nretryops.original.offset=42\n" +
		"retryops.original.timestamp=2026-01-02T03:04:05.000000006Z\n" +
		"retryops.attempts=0\nretryops.due=" + headers.FormatTime(now) + "\n"
	if b.String() != want {
		t.Errorf("replay headers:\n%s\nwant:\n%s", b.String(), want)
	}

	// A dead letter of a replay: the count goes on, the previous replay.of is replaced.
	got, err = headers.ReplayHeaders(deadLetterHeaders(2), "orders.dlq", 0, 8, now)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, h := range got {
		switch h.Key {
		case headers.ReplayCount:
			n++
			if string(h.Value) != "3" {
				t.Errorf("count %q, want 3", h.Value)
			}
		case headers.ReplayOf:
			n++
			if string(h.Value) != "orders.dlq/0/8" {
				t.Errorf("replay.of %q", h.Value)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d replay headers, want 2", n)
	}

	if _, err := headers.ReplayHeaders(deadLetterHeaders(headers.MaxReplayCount), "orders.dlq", 0, 8, now); !errors.Is(err, headers.ErrReplayLimit) {
		t.Errorf("at the limit: %v, want ErrReplayLimit", err)
	}
	for _, k := range []string{headers.ValueOmitted, headers.KeyOmitted} {
		stripped := append(deadLetterHeaders(0), headers.Header{Key: k, Value: []byte("12")})
		if _, err := headers.ReplayHeaders(stripped, "orders.dlq", 0, 8, now); !errors.Is(err, headers.ErrIncomplete) {
			t.Errorf("with %s: %v, want ErrIncomplete", k, err)
		}
	}
	// The replay names the dead letter's pipeline (once, the last as the dispatcher would check
	// them), and none when the dead letter names none.
	for name, c := range map[string]struct {
		hs   []headers.Header
		want []string
	}{
		"repeated": {append(deadLetterHeaders(0), headers.Header{Key: headers.Pipeline, Value: []byte("ns/q")}), []string{"ns/q"}},
		"absent":   {slices.DeleteFunc(deadLetterHeaders(0), func(h headers.Header) bool { return h.Key == headers.Pipeline }), nil},
	} {
		got, err := headers.ReplayHeaders(c.hs, "orders.dlq", 0, 8, now)
		var ps []string
		for _, h := range got {
			if h.Key == headers.Pipeline {
				ps = append(ps, string(h.Value))
			}
		}
		if err != nil || !slices.Equal(ps, c.want) {
			t.Errorf("%s: pipelines %q (%v), want %q", name, ps, err, c.want)
		}
	}
	if c, err := headers.ReplayCountOf(deadLetterHeaders(7)); c != 7 || err != nil {
		t.Errorf("ReplayCountOf = %d, %v", c, err)
	}
}

func TestReplayHeadersRejects(t *testing.T) {
	now := time.Now()
	without := func(key string) []headers.Header {
		var out []headers.Header
		for _, h := range deadLetterHeaders(0) {
			if h.Key != key {
				out = append(out, h)
			}
		}
		return out
	}
	with := func(k, v string) []headers.Header {
		return append(deadLetterHeaders(0), headers.Header{Key: k, Value: []byte(v)})
	}
	for name, c := range map[string]struct {
		hs    []headers.Header
		topic string
	}{
		"no original topic":      {without(headers.OriginalTopic), "dlq"},
		"no original partition":  {without(headers.OriginalPartition), "dlq"},
		"no original offset":     {without(headers.OriginalOffset), "dlq"},
		"no original timestamp":  {without(headers.OriginalTimestamp), "dlq"},
		"bad original partition": {with(headers.OriginalPartition, "-1"), "dlq"},
		"bad original offset":    {with(headers.OriginalOffset, "x"), "dlq"},
		"bad original timestamp": {with(headers.OriginalTimestamp, "yesterday"), "dlq"},
		"bad original topic":     {with(headers.OriginalTopic, "a/b"), "dlq"},
		"bad count":              {with(headers.ReplayCount, "0"), "dlq"},
		"huge count":             {with(headers.ReplayCount, "9223372036854775808"), "dlq"},
		"repeated count":         {append(with(headers.ReplayCount, "1"), headers.Header{Key: headers.ReplayCount, Value: []byte("1")}), "dlq"},
		"bad dlq topic":          {deadLetterHeaders(0), "a b"},
		"empty dlq topic":        {deadLetterHeaders(0), ""},
	} {
		if hs, err := headers.ReplayHeaders(c.hs, c.topic, 0, 1, now); err == nil {
			t.Errorf("%s: %d headers, want an error", name, len(hs))
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if _, err := headers.ReplayHeaders(deadLetterHeaders(0), "dlq", -1, 1, now); err == nil {
		t.Error("negative partition accepted")
	}
	if _, err := headers.ReplayHeaders(deadLetterHeaders(0), "dlq", 0, -1, now); err == nil {
		t.Error("negative offset accepted")
	}
}

// FuzzReplayHeaders: no input panics; an accepted replay.of formats back to itself; a replay.count
// accepted is in range; ReplayHeaders either fails or yields exactly one of each replay header.
func FuzzReplayHeaders(f *testing.F) {
	f.Add("orders.dlq/0/42", "1", "orders", "0", "42")
	f.Add("a/2147483648/0", "101", "", "-1", "x")
	f.Add("a b/0/1", "9223372036854775808", "t", "01", "1")
	f.Fuzz(func(t *testing.T, of, count, origTopic, origPart, origOff string) {
		if topic, p, o, err := headers.ParseReplayOf(of); err == nil {
			if headers.FormatReplayOf(topic, p, o) != of || p < 0 || o < 0 || len(of) > headers.MaxReplayOfBytes {
				t.Fatalf("ParseReplayOf(%q) = %q %d %d", of, topic, p, o)
			}
		}
		if n, err := headers.ParseReplayCount(count); err == nil && (n < 1 || n > headers.MaxReplayCount || strconv.Itoa(n) != count) {
			t.Fatalf("ParseReplayCount(%q) = %d", count, n)
		}
		hs := []headers.Header{
			{Key: headers.OriginalTopic, Value: []byte(origTopic)}, {Key: headers.OriginalPartition, Value: []byte(origPart)},
			{Key: headers.OriginalOffset, Value: []byte(origOff)}, {Key: headers.OriginalTimestamp, Value: []byte("2026-01-02T03:04:05Z")},
			{Key: headers.ReplayOf, Value: []byte(of)}, {Key: headers.ReplayCount, Value: []byte(count)},
		}
		out, err := headers.ReplayHeaders(hs, "dlq", 0, 1, time.Now())
		if err != nil {
			return
		}
		seen := map[string]int{}
		for _, h := range out {
			seen[h.Key]++
		}
		if seen[headers.ReplayOf] != 1 || seen[headers.ReplayCount] != 1 || seen[headers.Attempts] != 1 {
			t.Fatalf("headers %v", seen)
		}
	})
}
