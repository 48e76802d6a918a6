package batch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Status is a record's result.
type Status string

const (
	// StatusSuccess: the sink processed the record.
	StatusSuccess Status = "success"
	// StatusFailure: the sink did not; the policy decides what follows.
	StatusFailure Status = "failure"
)

// Bounds of what a response's result carries.
const (
	// MaxMessageBytes bounds a result's message (a longer one is cut on a UTF-8 boundary): more
	// than the dispatcher reads of a message, so that the cut changes nothing it matches.
	MaxMessageBytes = 4096
	// MaxRetryAfter bounds a result's Retry-After, as a single delivery's is bounded.
	MaxRetryAfter = 365 * 24 * time.Hour
)

// Response is the body of a batch response.
type Response struct {
	// Version is Version.
	Version string `json:"version"`
	// Results are the records' results, in any order.
	Results []Result `json:"results"`
}

// Result is one record's result.
type Result struct {
	// ID is the id of the record in the request.
	ID string `json:"id"`
	// Status is success or failure.
	Status Status `json:"status"`
	// HTTPStatus is the status a single delivery of the record would have had, 100-599, 0 for none.
	HTTPStatus int `json:"httpStatus,omitempty"`
	// ErrorType names the failure for the policy's rules.
	ErrorType string `json:"errorType,omitempty"`
	// Message describes the failure.
	Message string `json:"message,omitempty"`
	// RetryAfter is the sink's wait before the record's next attempt, 0 for none; written as
	// seconds ("retryAfter").
	RetryAfter time.Duration `json:"-"`
}

type plainResult Result

// MarshalJSON implements json.Marshaler, writing RetryAfter as seconds.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		plainResult
		RetryAfter float64 `json:"retryAfter,omitempty"`
	}{plainResult(r), r.RetryAfter.Seconds()})
}

// Success is the result of a record the sink processed.
func Success(id string) Result { return Result{ID: id, Status: StatusSuccess} }

// Failure is the result of a record the sink did not process.
func Failure(id string, httpStatus int, errorType, message string) Result {
	return Result{ID: id, Status: StatusFailure, HTTPStatus: httpStatus, ErrorType: errorType, Message: message}
}

// WriteResults answers a batch request with results: 200 and the response document.
func WriteResults(w http.ResponseWriter, results []Result) error {
	if results == nil {
		results = []Result{}
	}
	body, err := json.Marshal(Response{Version: Version, Results: results})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", MediaType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(body)
	return err
}

// resultWire is a result as read: the fields a hostile sink may get wrong are read raw.
type resultWire struct {
	ID         string          `json:"id"`
	Status     string          `json:"status"`
	HTTPStatus json.RawMessage `json:"httpStatus"`
	ErrorType  string          `json:"errorType"`
	Message    string          `json:"message"`
	RetryAfter json.RawMessage `json:"retryAfter"`
}

type responseWire struct {
	Version string       `json:"version"`
	Results []resultWire `json:"results"`
}

// Stats counts what ParseResponseStats found wrong in a response it read.
type Stats struct {
	// Unknown is the number of results whose id is not in the request (ignored).
	Unknown int
	// Duplicates is the number of results repeating an earlier one for the same record word for
	// word (ignored).
	Duplicates int
	// Conflicts is the number of records with results that disagree.
	Conflicts int
	// InvalidStatus is the number of results whose httpStatus was dropped (outside 100-599, not a
	// number, or not matching the result's status).
	InvalidStatus int
	// InvalidResult is the number of results whose status is neither success nor failure.
	InvalidResult int
}

// Problems reports whether the response had anything wrong.
func (s Stats) Problems() bool { return s != Stats{} }

// ParseResponse reads the body of a 2xx answer to a request with the given ids (see
// ParseResponseStats).
func ParseResponse(r io.Reader, ids []string, limit int64) (map[string]Result, error) {
	m, _, err := ParseResponseStats(r, ids, limit)
	return m, err
}

// ParseResponseStats reads the body of a 2xx answer to a request with the given ids, at most limit
// bytes (ResponseLimit), and returns each mentioned record's result, sanitised. Never a success for
// a record the sink did not say succeeded:
//   - a body over limit is an *Error ErrorTypeResponseTooLarge, invalid JSON or another version an
//     *Error ErrorTypeResponseInvalid: the whole batch fails;
//   - a result whose id is not in ids is ignored;
//   - a record with several results fails with ErrorTypeResultConflict unless they all agree;
//   - an httpStatus outside 100-599 (or not a number), 2xx on a failure or not 2xx on a success is
//     dropped and the record fails with ErrorTypeInvalidStatus;
//   - a status other than success or failure is a failure ErrorTypeResponseInvalid;
//   - a failure's error type and message are kept as the sink wrote them, control characters
//     included (a JSON string decodes to valid UTF-8), the message cut at MaxMessageBytes: the
//     dispatcher reads them as it reads a single answer's Retryops-Error-Type and body, so that
//     the policy matches the same text (and the response's limit bounds them);
//   - a retryAfter that is not a positive number of seconds nor duration is absent.
//
// Stats counts each of these but the whole-batch failures. A record absent from the map was not
// mentioned: the caller fails it with ErrorTypeResultMissing.
func ParseResponseStats(r io.Reader, ids []string, limit int64) (map[string]Result, Stats, error) {
	var st Stats
	body, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, st, errorf(ErrorTypeResponseInvalid, "reading the body: %v", err)
	}
	if int64(len(body)) > limit {
		return nil, st, errorf(ErrorTypeResponseTooLarge, "body over %d bytes", limit)
	}
	var doc responseWire
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, st, errorf(ErrorTypeResponseInvalid, "%s", clean(err.Error(), MaxMessageBytes))
	}
	if err := checkVersion(clean(doc.Version, maxVersionBytes), ErrorTypeResponseInvalid); err != nil {
		return nil, st, err
	}
	known := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		known[id] = struct{}{}
	}
	out := make(map[string]Result, len(ids))
	conflict := make(map[string]bool)
	for i := range doc.Results {
		res, bad := normalise(&doc.Results[i])
		if _, ok := known[res.ID]; !ok {
			st.Unknown++
			continue
		}
		switch bad {
		case badStatus:
			st.InvalidStatus++
		case badResult:
			st.InvalidResult++
		}
		if conflict[res.ID] {
			continue
		}
		prev, seen := out[res.ID]
		switch {
		case !seen:
			out[res.ID] = res
		case prev == res:
			st.Duplicates++
		default:
			conflict[res.ID] = true
			st.Conflicts++
			out[res.ID] = Result{ID: res.ID, Status: StatusFailure, ErrorType: ErrorTypeResultConflict,
				Message: "the response has results for this record that disagree"}
		}
	}
	return out, st, nil
}

// What normalise found wrong in a result.
const (
	badNone = iota
	badStatus
	badResult
)

// normalise makes a result as read one the dispatcher can act on, never a success the sink did not
// state plainly; bad says what it had to correct.
func normalise(w *resultWire) (res Result, bad int) {
	res = Result{ID: w.ID, Status: Status(w.Status)}
	status, statusOK := httpStatus(w.HTTPStatus)
	switch res.Status {
	case StatusSuccess:
		if !statusOK || (status != 0 && (status < 200 || status > 299)) {
			return Result{ID: w.ID, Status: StatusFailure, ErrorType: ErrorTypeInvalidStatus,
				Message: "a success with httpStatus " + clean(string(w.HTTPStatus), 64)}, badStatus
		}
		return res, badNone
	case StatusFailure:
	default:
		return Result{ID: w.ID, Status: StatusFailure, ErrorType: ErrorTypeResponseInvalid,
			Message: "unknown status " + strconv.Quote(clean(w.Status, 64))}, badResult
	}
	res.ErrorType = w.ErrorType
	res.Message = cut(w.Message, MaxMessageBytes)
	res.RetryAfter = retryAfter(w.RetryAfter)
	if !statusOK || (status >= 200 && status <= 299) {
		res.ErrorType = ErrorTypeInvalidStatus
		res.Message = clean(fmt.Sprintf("httpStatus %s dropped; %s: %s", w.HTTPStatus, w.ErrorType, w.Message), MaxMessageBytes)
		return res, badStatus
	}
	res.HTTPStatus = status
	return res, badNone
}

// httpStatus reads an httpStatus: 0 and true when absent, false when not an integer in 100-599.
func httpStatus(raw json.RawMessage) (int, bool) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return 0, true
	}
	n, err := strconv.Atoi(string(raw))
	if err != nil || n < 100 || n > 599 {
		return 0, false
	}
	return n, true
}

// retryAfter reads a retryAfter, seconds or a duration string, as a delay in 0..MaxRetryAfter.
func retryAfter(raw json.RawMessage) time.Duration {
	var secs float64
	switch {
	case len(raw) == 0:
		return 0
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0
		}
		secs = d.Seconds()
	default:
		// ParseFloat, not json.Unmarshal: a number past float64 (1e400) is ±Inf and capped, as a
		// single delivery's Retry-After is, not ignored.
		var err error
		if secs, err = strconv.ParseFloat(string(raw), 64); err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0
		}
	}
	switch {
	case !(secs > 0) || math.IsNaN(secs):
		return 0
	case secs >= MaxRetryAfter.Seconds():
		return MaxRetryAfter
	}
	return time.Duration(secs * float64(time.Second))
}

// maxVersionBytes bounds the version quoted in the error of a response of another version.
const maxVersionBytes = 256

// clean replaces control characters and invalid UTF-8 with U+FFFD and cuts s to at most n bytes on
// a UTF-8 boundary: the texts this package writes itself about a bad response.
func clean(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return '\uFFFD'
			}
			return r
		}, s)
	}
	return cut(s, n)
}

// cut cuts s to at most n bytes on a UTF-8 boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
