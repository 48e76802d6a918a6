package dispatcher_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retry"
)

// rawAnswer is a sink's answer to one record as bytes: what a single answer carries in its status,
// Retryops-Error-Type and Retry-After headers and its body, and a batch result in its fields.
type rawAnswer struct {
	status     int
	errorType  string // bytes a header value may hold: no control character but tab
	message    string // any bytes
	retryAfter string // a JSON number, "" for none
}

// roundTrip is an http.RoundTripper from a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// singleAnswer is a's single answer, parsed by net/http from the bytes a sink sends.
func singleAnswer(t testing.TB, a rawAnswer) roundTrip {
	return func(req *http.Request) (*http.Response, error) {
		var b bytes.Buffer
		fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", a.status, http.StatusText(a.status))
		if a.errorType != "" {
			b.WriteString("Retryops-Error-Type: " + a.errorType + "\r\n")
		}
		if a.retryAfter != "" {
			b.WriteString("Retry-After: " + a.retryAfter + "\r\n")
		}
		fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(a.message), a.message)
		resp, err := http.ReadResponse(bufio.NewReader(&b), req)
		if err != nil {
			t.Fatalf("the single answer %q does not parse: %v", b.String(), err)
		}
		return resp, nil
	}
}

// batchAnswer is a batch answer giving every record a's result, encoded as a sink's json.Marshal
// writes it.
func batchAnswer(t testing.TB, a rawAnswer) roundTrip {
	return func(req *http.Request) (*http.Response, error) {
		doc, err := batch.ParseRequest(req, 1<<20)
		if err != nil {
			t.Fatalf("ParseRequest: %v", err)
		}
		type result struct {
			ID         string          `json:"id"`
			Status     string          `json:"status"`
			HTTPStatus int             `json:"httpStatus"`
			ErrorType  string          `json:"errorType,omitempty"`
			Message    string          `json:"message,omitempty"`
			RetryAfter json.RawMessage `json:"retryAfter,omitempty"`
		}
		var rs []result
		for _, r := range doc.Records {
			res := result{ID: r.ID, Status: "failure", HTTPStatus: a.status, ErrorType: a.errorType, Message: a.message}
			if a.retryAfter != "" {
				res.RetryAfter = json.RawMessage(a.retryAfter)
			}
			rs = append(rs, res)
		}
		body, err := json.Marshal(map[string]any{"version": batch.Version, "results": rs})
		if err != nil {
			t.Fatalf("encoding the answer: %v", err)
		}
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {batch.MediaType}},
			Body:          readCloser{bytes.NewReader(body)},
			ContentLength: int64(len(body)), Request: req}, nil
	}
}

// lowRand samples every delay at the bottom of its window.
type lowRand struct{}

func (lowRand) Int63n(int64) int64 { return 0 }

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// textPolicy classifies by message and error type, honouring Retry-After.
func textPolicy(t testing.TB) *retry.Compiled {
	t.Helper()
	c, err := retry.Compile(retry.Policy{MaxAttempts: 5,
		Backoff: retry.Backoff{InitialDelay: time.Second, Multiplier: "2", MaxDelay: time.Minute},
		Classification: retry.Classification{DefaultAction: retry.ActionRetry, Rules: []retry.Rule{
			{Name: "quota", Action: retry.ActionDeadLetter, MessagePatterns: []string{`^quota\s+exceeded$`}},
			{Name: "typed", Action: retry.ActionDrop, ErrorTypes: []string{"Throttled", "Tab\tType", "\uFFFD", strings.Repeat("é", 150)}},
			{Name: "ends", Action: retry.ActionDeadLetter, MessagePatterns: []string{`(?s)\x00|\x{FFFD}$|^\s|\s$|é$`}},
		}},
		RetryAfter: retry.RetryAfter{Honor: true, MaxDelay: time.Hour}})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return c
}

// outcomeOf delivers one record, alone or in a batch of two, to a sink answering a; it returns
// the record's Result and the decision the policy takes on it.
func outcomeOf(t testing.TB, pol *retry.Compiled, a rawAnswer, inBatch bool) (dispatcher.Result, retry.Decision) {
	t.Helper()
	fc := clocktesting.NewFakeClock(batchTS)
	var res dispatcher.Result
	if inBatch {
		sink := dispatcher.NewHTTPSinkTransport(batchAnswer(t, a), dispatcher.WithSinkClock(fc))
		rs := sink.DeliverBatch(context.Background(), batchDeliveries(2))
		if len(rs) != 2 || !reflect.DeepEqual(rs[0], rs[1]) {
			t.Fatalf("batch results %+v, want two alike", rs)
		}
		res = rs[0]
	} else {
		sink := dispatcher.NewHTTPSinkTransport(singleAnswer(t, a), dispatcher.WithSinkClock(fc))
		res = sink.Deliver(context.Background(), batchDeliveries(1)[0])
	}
	return res, pol.Decide(res.Outcome, 1, batchTS, batchTS, lowRand{})
}

// TestBatchMessageMatchedAsAlone: a message with a trailing newline, a tab or an inner newline
// matches ^quota\s+exceeded$ in a batch result as it does in a single answer's body.
func TestBatchMessageMatchedAsAlone(t *testing.T) {
	pol := textPolicy(t)
	for _, msg := range []string{"quota exceeded\n", "quota\texceeded", "quota\nexceeded", "\r\nquota  exceeded\t\r\n"} {
		a := rawAnswer{status: 429, message: msg}
		_, alone := outcomeOf(t, pol, a, false)
		res, inBatch := outcomeOf(t, pol, a, true)
		if alone.Rule != "quota" || alone.Action != retry.ActionDeadLetter {
			t.Fatalf("%q alone: rule %q action %s, want quota, DeadLetter", msg, alone.Rule, alone.Action)
		}
		if inBatch.Rule != alone.Rule || inBatch.Action != alone.Action {
			t.Errorf("%q in a batch: rule %q action %s (message %q), want as alone: rule %q action %s",
				msg, inBatch.Rule, inBatch.Action, res.Outcome.Message, alone.Rule, alone.Action)
		}
	}
}

// genText is a random text of about n bytes: ASCII, white space of every kind, control
// characters, multi-byte runes, U+FFFD and invalid UTF-8, each likely at a bound.
func genText(r *rand.Rand, n int, headerSafe bool) string {
	atoms := []string{"quota", " ", "exceeded", "\t", "é", "€", "😀", "\uFFFD", "\u0085", "\u00a0", "\u2028", "\xff", "\xe2\x82", "\xc3",
		"\xf0\x9f\x98", "\x80", "Throttled", "x"}
	if !headerSafe {
		atoms = append(atoms, "\n", "\r", "\x00", "\x1b[31m", "\v", "\f", "\x7f", "\r\n")
	}
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(atoms[r.IntN(len(atoms))])
	}
	return b.String()
}

// genAnswer is a random answer whose texts straddle the bounds a single answer and a batch
// result are read with (the 1 KiB message, the 256 and 317 bytes of error types).
func genAnswer(r *rand.Rand) rawAnswer {
	statuses := []int{300, 304, 400, 404, 408, 413, 415, 422, 429, 451, 499, 500, 502, 503, 504, 555, 599}
	a := rawAnswer{status: statuses[r.IntN(len(statuses))]}
	if r.IntN(5) > 0 {
		a.status = 300 + r.IntN(300)
	}
	lengths := []int{0, 1, 5, 14, 200, 254, 255, 256, 257, 258, 300, 315, 316, 317, 318, 319, 320, 1019, 1020, 1021, 1022,
		1023, 1024, 1025, 1026, 1027, 2000, 4095, 4096, 4097, 5000}
	switch r.IntN(6) {
	case 0:
	case 1:
		a.errorType = []string{"Throttled", " Throttled\t", "Tab\tType", "\uFFFD", "\xff", strings.Repeat("é", 150)}[r.IntN(6)]
	default:
		a.errorType = genText(r, lengths[r.IntN(len(lengths))], true)
	}
	a.errorType = strings.Trim(a.errorType, " \t") // leading or trailing, a header value loses them
	if r.IntN(4) == 0 {
		a.errorType = " " + a.errorType + "\t"
	}
	switch r.IntN(7) {
	case 0:
	case 1:
		a.message = []string{"quota exceeded\n", "quota\texceeded", "\x00", "é", "  "}[r.IntN(5)]
	case 2: // a rune, or bytes that are none, across the 1 KiB read of a body
		a.message = strings.Repeat("m", 1018+r.IntN(7)) + genText(r, 12, false)
	default:
		a.message = genText(r, lengths[r.IntN(len(lengths))], false)
	}
	if a.status == http.StatusNotModified {
		a.message = "" // a 304 alone has no body
	}
	switch r.IntN(4) {
	case 0:
	case 1:
		a.retryAfter = strconv.Itoa(r.IntN(100000) - 10)
	case 2:
		a.retryAfter = strconv.FormatFloat(r.Float64()*1e4, 'f', -1, 64)
	default:
		a.retryAfter = []string{"0", "-0", "1e400", "-1e400", "1e-400", "31536000", "31536001", "2.5e3", "0.0000000001", "1E2"}[r.IntN(10)]
	}
	return a
}

// TestBatchResultIsASingleAnswer is a property: for any status, error type, message and
// Retry-After, a batch result gives the record the Result a single answer gives it, so the same
// classification (action, rule), the same delay, and the same error type and message recorded.
func TestBatchResultIsASingleAnswer(t *testing.T) {
	pol := textPolicy(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 39))
	n := 1500
	if testing.Short() {
		n = 300
	}
	for i := range n {
		a := genAnswer(r)
		single, alone := outcomeOf(t, pol, a, false)
		batched, inBatch := outcomeOf(t, pol, a, true)
		if !reflect.DeepEqual(single, batched) || !reflect.DeepEqual(alone, inBatch) {
			t.Fatalf("case %d (seed %d): answer %#v\n alone:    %#v %+v\n in batch: %#v %+v", i, seed, a, single, alone, batched, inBatch)
		}
		recorded := func(res dispatcher.Result) [2]string {
			return [2]string{headers.TruncateErrorType(res.Outcome.ErrorType), headers.TruncateMessage(res.Outcome.Message)}
		}
		if recorded(single) != recorded(batched) {
			t.Fatalf("case %d: recorded %q alone, %q in a batch", i, recorded(single), recorded(batched))
		}
	}
}

// TestBatchErrorTypeRecordedAsAlone: an error type longer than 256 bytes is matched whole and
// recorded with its first headers.MaxErrorTypeBytes bytes, in a batch as alone.
func TestBatchErrorTypeRecordedAsAlone(t *testing.T) {
	pol := textPolicy(t)
	for _, et := range []string{strings.Repeat("é", 150), strings.Repeat("t", 400)} {
		a := rawAnswer{status: 503, errorType: et, message: "busy"}
		single, alone := outcomeOf(t, pol, a, false)
		batched, inBatch := outcomeOf(t, pol, a, true)
		want := et[:min(len(et), headers.MaxErrorTypeBytes)]
		if got := headers.TruncateErrorType(single.Outcome.ErrorType); got != want {
			t.Errorf("%d-byte error type alone recorded as %d bytes, want %d", len(et), len(got), len(want))
		}
		if got := headers.TruncateErrorType(batched.Outcome.ErrorType); got != want {
			t.Errorf("%d-byte error type in a batch recorded as %d bytes, want %d", len(et), len(got), len(want))
		}
		if alone.Rule != inBatch.Rule {
			t.Errorf("%d-byte error type: rule %q alone, %q in a batch", len(et), alone.Rule, inBatch.Rule)
		}
	}
}
