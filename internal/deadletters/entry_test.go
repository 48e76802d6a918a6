package deadletters_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

func TestParseEntryReadsTheContextHeaders(t *testing.T) {
	ts := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	r := kafka.Record{Topic: dlqTopic, Partition: 2, Offset: 41, Timestamp: ts, Key: []byte("k"), Value: []byte("v"), Headers: []kafka.Header{
		{Key: "tenant", Value: []byte("eu")},
		{Key: headers.Reason, Value: []byte("first")},
		{Key: headers.Reason, Value: []byte(headers.ReasonMaxRetriesExceeded)},
		{Key: headers.ErrorType, Value: []byte("TimeoutError")},
		{Key: headers.ErrorMessage, Value: []byte("timed out")},
		{Key: headers.HTTPStatus, Value: []byte("504")},
		{Key: headers.Pipeline, Value: []byte("shop/orders")},
		{Key: headers.ConsumerGroup, Value: []byte("orders")},
		{Key: headers.Attempts, Value: []byte("5")},
		{Key: headers.FirstFailure, Value: []byte(headers.FormatTime(ts.Add(-time.Minute)))},
		{Key: headers.LastFailure, Value: []byte(headers.FormatTime(ts))},
		{Key: headers.OriginalTopic, Value: []byte("orders")},
		{Key: headers.OriginalPartition, Value: []byte("7")},
		{Key: headers.OriginalOffset, Value: []byte("12345")},
		{Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(ts.Add(-time.Hour)))},
		{Key: headers.ReplayOf, Value: []byte("orders.dlq/0/3")},
		{Key: headers.ReplayCount, Value: []byte("2")},
	}}
	e := deadletters.ParseEntry(r)
	r.Key[0], r.Headers[0].Value[0] = 'X', 'X' // the entry keeps copies
	ns, name, ok := e.PipelineRef()
	if e.ID != (deadletters.ID{Partition: 2, Offset: 41}) || !e.Time.Equal(ts) || e.Reason != headers.ReasonMaxRetriesExceeded ||
		e.ErrorType != "TimeoutError" || e.ErrorMessage != "timed out" || e.HTTPStatus != 504 || e.Pipeline != "shop/orders" ||
		!ok || ns != "shop" || name != "orders" || e.ConsumerGroup != "orders" || e.Attempts != 5 ||
		!e.FirstFailure.Equal(ts.Add(-time.Minute)) || !e.LastFailure.Equal(ts) || !e.HasOriginal || e.OriginalTopic != "orders" ||
		e.OriginalPartition != 7 || e.OriginalOffset != 12345 || !e.OriginalTimestamp.Equal(ts.Add(-time.Hour)) ||
		e.ReplayOf != "orders.dlq/0/3" || e.ReplayCount != 2 || !e.ReplayCountValid ||
		string(e.Key) != "k" || string(e.Value) != "v" || len(e.Headers) != 17 || string(e.Headers[0].Value) != "eu" {
		t.Errorf("entry %+v", e)
	}
}

func TestParseEntryBoundsHostileHeaders(t *testing.T) {
	huge := bytes.Repeat([]byte("é"), 5000) // 10,000 bytes
	bad := []byte{0xff, 0xfe, 'a', 0xc3}
	r := kafka.Record{Headers: []kafka.Header{
		{Key: headers.Reason, Value: huge},
		{Key: headers.ErrorType, Value: bad},
		{Key: headers.ErrorMessage, Value: huge},
		{Key: headers.Pipeline, Value: append(bytes.Repeat(bad, 200), huge...)},
		{Key: headers.HTTPStatus, Value: []byte("5030")},
		{Key: headers.Attempts, Value: []byte("-1")},
		{Key: headers.OriginalTopic, Value: []byte("a/b")},
		{Key: headers.OriginalOffset, Value: []byte("99999999999999999999999")},
		{Key: headers.OriginalTimestamp, Value: huge},
		{Key: headers.ReplayOf, Value: huge},
		{Key: headers.ReplayCount, Value: []byte("0")},
	}}
	e := deadletters.ParseEntry(r)
	for name, v := range map[string]struct {
		s   string
		max int
	}{"reason": {e.Reason, deadletters.MaxNameBytes}, "errorType": {e.ErrorType, deadletters.MaxNameBytes}, "message": {e.ErrorMessage, deadletters.MaxMessageBytes}, "pipeline": {e.Pipeline, deadletters.MaxNameBytes}} {
		if len(v.s) > v.max || !utf8.ValidString(v.s) {
			t.Errorf("%s: %d bytes, valid UTF-8 %v; want at most %d, valid", name, len(v.s), utf8.ValidString(v.s), v.max)
		}
	}
	if e.HTTPStatus != 0 || e.Attempts != 0 || e.HasOriginal || e.OriginalTopic != "" || e.OriginalOffset != -1 || e.ReplayOf != "" || e.ReplayCountValid {
		t.Errorf("invalid headers read as %+v", e)
	}
}

func TestIDsAndStatesRoundTrip(t *testing.T) {
	for _, s := range []string{"0/0", "2147483647/9223372036854775807", "3/17"} {
		id, ok := deadletters.ParseID(s)
		if !ok || id.String() != s {
			t.Errorf("ParseID(%q) = %v %v", s, id, ok)
		}
	}
	for _, s := range []string{"", "1", "/1", "1/", "01/1", "1/01", "-1/1", "2147483648/0", "1/9223372036854775808", "1/2/3", " 1/2", "1/2 "} {
		if id, ok := deadletters.ParseID(s); ok {
			t.Errorf("ParseID(%q) = %v, want refused", s, id)
		}
	}
	st := deadletters.State{State: retryv1alpha1.DeadLetterResolved, Note: "n", RequestedBy: "jane", Action: deadletters.ActionRef{Namespace: "a", Name: "b", UID: "c"},
		Time: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), ReplayCount: 2}
	b, err := deadletters.EncodeState(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := deadletters.DecodeState(b)
	if err != nil || got != st {
		t.Errorf("round trip: %+v %v", got, err)
	}
	if s, err := deadletters.DecodeState(nil); err != nil || !s.Pending() {
		t.Errorf("tombstone: %+v %v", s, err)
	}
	for name, v := range map[string]string{
		"unknown state":  `{"state":"Deleted","action":{"namespace":"","name":"","uid":""},"time":"2030-01-01T00:00:00Z"}`,
		"unknown field":  `{"state":"Ignored","extra":1,"action":{"namespace":"","name":"","uid":""},"time":"2030-01-01T00:00:00Z"}`,
		"long note":      `{"state":"Ignored","note":"` + strings.Repeat("x", 1025) + `","action":{"namespace":"","name":"","uid":""},"time":"2030-01-01T00:00:00Z"}`,
		"replay count":   `{"state":"Replayed","replayCount":101,"action":{"namespace":"","name":"","uid":""},"time":"2030-01-01T00:00:00Z"}`,
		"trailing data":  `{"state":"Ignored","action":{"namespace":"","name":"","uid":""},"time":"2030-01-01T00:00:00Z"} {}`,
		"not JSON":       `Resolved`,
		"too large":      `{"state":"Ignored","note":"` + strings.Repeat(" ", deadletters.MaxStateBytes) + `"}`,
		"empty (no nil)": ``,
	} {
		if s, err := deadletters.DecodeState([]byte(v)); err == nil {
			t.Errorf("%s: decoded %+v", name, s)
		}
	}
	if name, ok := deadletters.StateTopic("orders.dlq"); !ok || name != "orders.dlq.state" {
		t.Errorf("StateTopic = %q %v", name, ok)
	}
	if _, ok := deadletters.StateTopic(strings.Repeat("a", 244)); ok {
		t.Error("a state topic name longer than 249 accepted")
	}
}

// Whatever the headers, ParseEntry neither panics nor keeps more than its bounds.
func FuzzParseEntry(f *testing.F) {
	f.Add("retryops.reason", []byte("max_retries_exceeded"), "retryops.replay.count", []byte("2"), []byte("k"))
	f.Add("retryops.original.offset", []byte("-0"), "retryops.http.status", []byte("99999"), []byte(nil))
	f.Add("retryops.replay.of", []byte("a/1/2"), "retryops.replay.count", []byte("01"), []byte{0xff})
	f.Add("retryops.error.message", bytes.Repeat([]byte{0xe2, 0x82}, 700), "retryops.first.failure", []byte("2030-13-01T00:00:00Z"), []byte("x"))
	f.Fuzz(func(t *testing.T, k1 string, v1b []byte, k2 string, v2 []byte, key []byte) {
		r := kafka.Record{Key: key, Headers: []kafka.Header{{Key: k1, Value: v1b}, {Key: k2, Value: v2}, {Key: k1, Value: v2}}}
		e := deadletters.ParseEntry(r)
		for _, s := range []struct {
			v   string
			max int
		}{{e.Reason, deadletters.MaxNameBytes}, {e.ErrorType, deadletters.MaxNameBytes}, {e.Pipeline, deadletters.MaxNameBytes},
			{e.ErrorMessage, deadletters.MaxMessageBytes}, {e.ConsumerGroup, deadletters.MaxGroupBytes}, {e.Rule, deadletters.MaxRuleBytes}} {
			if len(s.v) > s.max || !utf8.ValidString(s.v) {
				t.Fatalf("field %q out of bounds", s.v)
			}
		}
		if e.ReplayCount < 0 || e.ReplayCount > headers.MaxReplayCount || e.Attempts < 0 || (e.HTTPStatus != 0 && (e.HTTPStatus < 100 || e.HTTPStatus > 599)) {
			t.Fatalf("entry %+v", e)
		}
		if e.HasOriginal && (e.OriginalPartition < 0 || e.OriginalOffset < 0 || !headers.ValidTopicName(e.OriginalTopic)) {
			t.Fatalf("original %+v", e)
		}
		m, err := deadletters.Compile(retryv1alpha1.DeadLetterReplay, &retryv1alpha1.DeadLetterSelector{Headers: []retryv1alpha1.HeaderMatch{{Name: k1, Value: string(v2)}}})
		if err != nil {
			t.Fatal(err)
		}
		if !m.MatchEntry(&e) {
			t.Fatalf("the last %q header is %q, the selector does not match it", k1, v2)
		}
	})
}

// Whatever the value, DecodeState neither panics nor returns a state it would refuse to encode.
func FuzzDecodeState(f *testing.F) {
	f.Add([]byte(`{"state":"Resolved","note":"n","requestedBy":"jane","action":{"namespace":"a","name":"b","uid":"c"},"time":"2030-01-01T00:00:00Z","replayCount":1}`))
	f.Add([]byte(`{"state":"Replayed","replayCount":-1}`))
	f.Add([]byte(`{"state":"Ignored","note":"\ud800"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, v []byte) {
		s, err := deadletters.DecodeState(v)
		if err != nil {
			return
		}
		b, err := deadletters.EncodeState(s)
		if err != nil {
			t.Fatalf("decoded %+v, which does not encode: %v", s, err)
		}
		if !json.Valid(b) {
			t.Fatalf("encoded %q", b)
		}
	})
}
