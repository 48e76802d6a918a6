package batch

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var threeIDs = []string{"0", "1", "2"}

func TestParseResponse(t *testing.T) {
	huge := `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success","message":"` +
		strings.Repeat("x", 2000) + `"}]}`
	cases := []struct {
		name    string
		body    string
		limit   int64
		want    map[string]Result
		errType string
		stats   Stats
	}{
		{name: "a success and a failure with every field are read as sent",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success"},
				{"id":"1","status":"failure","httpStatus":503,"errorType":"Throttled","message":"slow","retryAfter":30}]}`,
			want: map[string]Result{"0": Success("0"),
				"1": {ID: "1", Status: StatusFailure, HTTPStatus: 503, ErrorType: "Throttled", Message: "slow", RetryAfter: 30 * time.Second}}},
		{name: "a retryAfter as a duration string is read",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"failure","retryAfter":"1m30s"}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, RetryAfter: 90 * time.Second}}},
		{name: "a retryAfter that is negative, invalid or huge is absent or capped",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"failure","retryAfter":-3},
				{"id":"1","status":"failure","retryAfter":"soon"},{"id":"2","status":"failure","retryAfter":1e300}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure}, "1": {ID: "1", Status: StatusFailure},
				"2": {ID: "2", Status: StatusFailure, RetryAfter: MaxRetryAfter}}},
		{name: "a retryAfter past float64 is capped, as a single delivery's Retry-After is",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"failure","retryAfter":1e400},
				{"id":"1","status":"failure","retryAfter":-1e400}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, RetryAfter: MaxRetryAfter}, "1": {ID: "1", Status: StatusFailure}}},
		{name: "an unmentioned record is absent from the map",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"1","status":"success"}]}`,
			want: map[string]Result{"1": Success("1")}},
		{name: "ids not in the request are ignored and counted",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"7","status":"success"},{"id":"","status":"success"},{"id":"0","status":"success"}]}`,
			want: map[string]Result{"0": Success("0")}, stats: Stats{Unknown: 2}},
		{name: "duplicated ids that agree are one result",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success"},{"id":"0","status":"success"}]}`,
			want: map[string]Result{"0": Success("0")}, stats: Stats{Duplicates: 1}},
		{name: "duplicated ids that disagree fail the record, whatever comes after",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"failure"},{"id":"0","status":"success"},{"id":"0","status":"success"}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, ErrorType: ErrorTypeResultConflict,
				Message: "the response has results for this record that disagree"}}, stats: Stats{Conflicts: 1}},
		{name: "a status outside 100-599 is dropped and the record fails InvalidStatus",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"failure","httpStatus":999,"errorType":"X","message":"m"},
				{"id":"1","status":"failure","httpStatus":"503"}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, ErrorType: ErrorTypeInvalidStatus, Message: "httpStatus 999 dropped; X: m"},
				"1": {ID: "1", Status: StatusFailure, ErrorType: ErrorTypeInvalidStatus, Message: `httpStatus "503" dropped; : `}},
			stats: Stats{InvalidStatus: 2}},
		{name: "a success with a status not 2xx is a failure, a failure with 2xx too",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success","httpStatus":500},
				{"id":"1","status":"success","httpStatus":42},{"id":"2","status":"failure","httpStatus":200}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, ErrorType: ErrorTypeInvalidStatus, Message: "a success with httpStatus 500"},
				"1": {ID: "1", Status: StatusFailure, ErrorType: ErrorTypeInvalidStatus, Message: "a success with httpStatus 42"},
				"2": {ID: "2", Status: StatusFailure, ErrorType: ErrorTypeInvalidStatus, Message: "httpStatus 200 dropped; : "}},
			stats: Stats{InvalidStatus: 3}},
		{name: "a status other than success or failure is a failure",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"SUCCESS"},{"id":"1"}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, ErrorType: ErrorTypeResponseInvalid, Message: `unknown status "SUCCESS"`},
				"1": {ID: "1", Status: StatusFailure, ErrorType: ErrorTypeResponseInvalid, Message: `unknown status ""`}},
			stats: Stats{InvalidResult: 2}},
		{name: "error types and messages keep their control characters, messages are cut",
			body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"failure","errorType":" ` + strings.Repeat("é", 200) +
				`\t","message":"a\u001b[31mb\u0085c\n` + strings.Repeat("m", 5000) + `"}]}`,
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, ErrorType: " " + strings.Repeat("é", 200) + "\t",
				Message: ("a\u001b[31mb\u0085c\n" + strings.Repeat("m", 5000))[:MaxMessageBytes]}}},
		{name: "a JSON string's invalid UTF-8 reads as U+FFFD, byte by byte",
			body: "{\"version\":\"retryops.dev/batch/v1\",\"results\":[{\"id\":\"0\",\"status\":\"failure\",\"errorType\":\"a\xe2\x82b\",\"message\":\"\xff\"}]}",
			want: map[string]Result{"0": {ID: "0", Status: StatusFailure, ErrorType: "a\uFFFD\uFFFDb", Message: "\uFFFD"}}},
		{name: "a body over the limit fails the batch", body: huge, limit: 1000, errType: ErrorTypeResponseTooLarge},
		{name: "a body of exactly the limit is read", body: huge, limit: int64(len(huge)),
			want: map[string]Result{"0": Success("0")}},
		{name: "invalid JSON fails the batch", body: `{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success"}`,
			errType: ErrorTypeResponseInvalid},
		{name: "trailing data fails the batch", body: `{"version":"retryops.dev/batch/v1","results":[]} {"results":[{"id":"0","status":"success"}]}`,
			errType: ErrorTypeResponseInvalid},
		{name: "an id that is not a string fails the batch", body: `{"version":"retryops.dev/batch/v1","results":[{"id":0,"status":"success"}]}`,
			errType: ErrorTypeResponseInvalid},
		{name: "a missing version fails the batch", body: `{"results":[{"id":"0","status":"success"}]}`, errType: ErrorTypeResponseInvalid},
		{name: "another major version fails the batch", body: `{"version":"retryops.dev/batch/v2","results":[{"id":"0","status":"success"}]}`,
			errType: ErrorTypeResponseInvalid},
		{name: "an empty body fails the batch", body: ``, errType: ErrorTypeResponseInvalid},
		{name: "null results mention no record", body: `{"version":"retryops.dev/batch/v1","results":null}`, want: map[string]Result{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			limit := c.limit
			if limit == 0 {
				limit = ResponseLimit(len(threeIDs))
			}
			got, st, err := ParseResponseStats(strings.NewReader(c.body), threeIDs, limit)
			if c.errType != "" {
				var e *Error
				if !errors.As(err, &e) || e.Type != c.errType {
					t.Fatalf("error %v, want type %s", err, c.errType)
				}
				if got != nil {
					t.Fatalf("results %v with an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if st != c.stats {
				t.Errorf("stats %+v, want %+v", st, c.stats)
			}
			if len(got) != len(c.want) {
				t.Errorf("got %d results %+v, want %d", len(got), got, len(c.want))
			}
			for id, w := range c.want {
				if got[id] != w {
					t.Errorf("result %s:\n got %+v\nwant %+v", id, got[id], w)
				}
			}
		})
	}
}

func TestErrorStatusCode(t *testing.T) {
	for typ, want := range map[string]int{ErrorTypeRequestTooLarge: 413, ErrorTypeUnsupportedMediaType: 415, ErrorTypeRequestInvalid: 400} {
		if got := (&Error{Type: typ}).StatusCode(); got != want {
			t.Errorf("%s: %d, want %d", typ, got, want)
		}
	}
}
