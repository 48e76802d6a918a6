package batch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// slack is what EncodedSize may count above a record's encoding: an absent headers field, and
// four bytes for each control character written in short form (\n as two bytes, not six).
func slack(r *Record) int {
	n := 0
	if len(r.Headers) == 0 {
		n += len(`"headers":[],`)
	}
	count := func(s string) {
		n += 4 * (strings.Count(s, "\n") + strings.Count(s, "\t"))
	}
	count(r.ID)
	count(string(r.RawValue))
	return n
}

func checkSize(t *testing.T, r Record) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, enc := r.EncodedSize(), len(b)+1
	if got < enc || got > enc+slack(&r) {
		t.Errorf("EncodedSize %d, encoded %d (+1 comma), slack %d: %s", got, enc, slack(&r), b)
	}
}

func TestEncodedSizeBoundsTheEncoding(t *testing.T) {
	big := time.Date(12345, 6, 7, 8, 9, 10, 0, time.UTC)
	recs := append(sampleRecords(),
		Record{ID: "x.1", Topic: "t", Timestamp: big, FirstFailure: &big, RawValue: Bytes(`<a href="x">&amp;</a>` + "\u2028\u2029\\\t\x01\x7f")},
		Record{ID: "x.2", Offset: -1, Attempt: 1 << 30, RawKey: Bytes{0xff, 0xfe, 0xfd, 0xfc}, RawValue: Bytes(strings.Repeat("é\"", 100)),
			Headers:       []Header{{Key: "k\xff<", Value: []byte("v\u2028")}, {Key: "", Value: []byte{}}, {Key: "b", Value: []byte{0x80}}},
			DeliveredFrom: "orders-retry-1/2/3", ReplayOf: "dlq/0/1", ReplayCount: 7},
		Record{ID: "x.3\n", RawValue: Bytes("line\nline\n")},
	)
	for _, r := range recs {
		checkSize(t, r)
	}
	var buf bytes.Buffer
	if err := EncodeRequest(&buf, recs); err != nil {
		t.Fatal(err)
	}
	sum := RequestOverhead
	for i := range recs {
		sum += recs[i].EncodedSize()
	}
	if buf.Len() > sum {
		t.Errorf("request of %d bytes, over its bound %d", buf.Len(), sum)
	}
}

func FuzzEncodedSize(f *testing.F) {
	f.Add("id", "topic", []byte("value"), []byte{0xff}, "hk", []byte("<&>"), int64(5))
	f.Fuzz(func(t *testing.T, id, topic string, value, key []byte, hk string, hv []byte, off int64) {
		r := Record{ID: id, Topic: topic, Offset: off, RawValue: value, RawKey: key, IdempotencyKey: topic + "/0/1",
			Headers: []Header{{Key: hk, Value: hv}}, DeliveredFrom: id}
		b, err := json.Marshal(r)
		if err != nil {
			t.Skip() // a timestamp or value the encoder refuses is not sized
		}
		if got := r.EncodedSize(); got < len(b)+1 {
			t.Fatalf("EncodedSize %d under the encoding's %d: %s", got, len(b)+1, b)
		}
	})
}
