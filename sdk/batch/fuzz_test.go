package batch

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseResponse checks that a success is only ever returned for an id of the request every one
// of whose results said success, and that every returned result is bounded.
func FuzzParseResponse(f *testing.F) {
	for _, s := range []string{
		`{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success"},{"id":"1","status":"failure","httpStatus":503,"retryAfter":"2s"}]}`,
		`{"version":"retryops.dev/batch/v1","results":[{"id":"0","status":"success"},{"id":"0","status":"failure"},{"id":"9","status":"success"}]}`,
		`{"version":"retryops.dev/batch/v1","results":[{"id":"2","status":"success","httpStatus":700}]}`,
		`{"version":"retryops.dev/batch/v2","results":[]}`,
		`[]`, ``, `{"version":"retryops.dev/batch/v1","results":[{"id":"1","status":"failure","message":"\u0000"}]}`,
	} {
		f.Add(s)
	}
	ids := []string{"0", "1", "2"}
	f.Fuzz(func(t *testing.T, body string) {
		got, st, err := ParseResponseStats(strings.NewReader(body), ids, ResponseLimit(len(ids)))
		if err != nil {
			if got != nil {
				t.Fatalf("results with an error: %v", got)
			}
			return
		}
		// What the sink said, as an independent reading: ids whose every result said success.
		var doc struct {
			Results []map[string]json.RawMessage `json:"results"`
		}
		_ = json.Unmarshal([]byte(body), &doc)
		said := map[string]int{}
		succeeded := map[string]int{}
		for _, r := range doc.Results {
			var id, status string
			_ = json.Unmarshal(r["id"], &id)
			_ = json.Unmarshal(r["status"], &status)
			said[id]++
			if status == string(StatusSuccess) {
				succeeded[id]++
			}
		}
		for id, res := range got {
			if !strings.Contains(",0,1,2,", ","+id+",") {
				t.Fatalf("result for %q, not in the request", id)
			}
			if res.ID != id {
				t.Fatalf("result %+v under id %q", res, id)
			}
			if res.Status == StatusSuccess && (said[id] == 0 || succeeded[id] != said[id]) {
				t.Fatalf("success for %q: %d of its %d results said success", id, succeeded[id], said[id])
			}
			if res.Status != StatusSuccess && res.Status != StatusFailure {
				t.Fatalf("status %q", res.Status)
			}
			if len(res.ErrorType) > len(body) || !utf8.ValidString(res.ErrorType) || len(res.Message) > MaxMessageBytes || !utf8.ValidString(res.Message) || res.RetryAfter < 0 || res.RetryAfter > MaxRetryAfter {
				t.Fatalf("unbounded result %+v", res)
			}
			if res.HTTPStatus != 0 && (res.HTTPStatus < 100 || res.HTTPStatus > 599) {
				t.Fatalf("status %d", res.HTTPStatus)
			}
		}
		if st.Unknown < 0 || st.Conflicts < 0 {
			t.Fatalf("stats %+v", st)
		}
	})
}
