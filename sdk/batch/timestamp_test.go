package batch

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestTimestampsOutsideRFC3339: a Kafka timestamp is any int64 of milliseconds a producer chose. A
// year past 9999 or before 0 must neither fail the encoding nor make ParseRequest refuse the whole
// batch (a sink answering 400 to it fails every record for one record's timestamp); such a record
// is read back with its instant intact.
func TestTimestampsOutsideRFC3339(t *testing.T) {
	for _, ms := range []int64{1 << 50, -(1 << 50), 253402300800000 /* 10000-01-01 */} {
		ts := time.UnixMilli(ms).UTC()
		ff := time.UnixMilli(ms + 1).UTC()
		recs := []Record{{ID: "0", IdempotencyKey: "t/0/1", Attempt: 2, Topic: "t", Offset: 1, Timestamp: ts, FirstFailure: &ff,
			RawValue: []byte("v")}}
		var buf bytes.Buffer
		if err := EncodeRequest(&buf, recs); err != nil {
			t.Fatalf("%d: EncodeRequest: %v", ms, err)
		}
		req := httptest.NewRequest(http.MethodPost, "/", &buf)
		req.Header.Set("Content-Type", MediaType)
		got, err := ParseRequest(req, 1<<20)
		if err != nil {
			t.Fatalf("%d: ParseRequest: %v", ms, err)
		}
		r := got.Records[0]
		if !r.Timestamp.Equal(ts) || r.FirstFailure == nil || !r.FirstFailure.Equal(ff) {
			t.Errorf("%d: read timestamp %v, first failure %v; want %v, %v", ms, r.Timestamp, r.FirstFailure, ts, ff)
		}
	}
}
