package dispatcher

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/testutil/golden"
)

// assertGolden compares got with testdata/<name>, or rewrites the file with -update.
func assertGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Assert(t, name, got, "cd sdk && go test ./dispatcher -run TestGoldenRecords (a stored format: read docs/development.md#stored-formats-and-compatibility first)")
}

// dump writes a record as text, one header a line in order, nil and empty told apart.
func dump(r *kgo.Record) []byte {
	var b bytes.Buffer
	q := func(v []byte) string {
		if v == nil {
			return "nil"
		}
		return strconv.Quote(string(v))
	}
	b.WriteString("topic: " + r.Topic + "\nkey: " + q(r.Key) + "\nvalue: " + q(r.Value) + "\nheaders:\n")
	for _, h := range r.Headers {
		b.WriteString("  " + h.Key + ": " + q(h.Value) + "\n")
	}
	return b.Bytes()
}

// goldenItems are the records the builders' golden files are built from: a first failure on the
// source topic, a later one on a retry tier (original coordinates, first failure carried), and a
// replayed dead letter.
func goldenItems() map[string]*item {
	t0 := time.Date(2026, 11, 26, 9, 30, 0, 123000000, time.UTC)
	src := &kgo.Record{Topic: "orders", Partition: 3, Offset: 42, Timestamp: t0, Key: []byte("k-1"), Value: []byte(`{"id":1}`),
		Headers: []kgo.RecordHeader{{Key: "content-type", Value: []byte("application/json")}, {Key: "trace", Value: []byte{0xff, 0}}, {Key: "empty"}}}
	consumed := &kgo.Record{Topic: "orders-retry-1", Partition: 0, Offset: 7, Timestamp: t0.Add(2 * time.Second)}
	tier := &item{rec: consumed, view: src, attempt: 2, srcTime: t0.Add(-time.Minute), firstFailure: t0.Add(time.Second)}
	noKey := *src
	noKey.Key, noKey.Value, noKey.Headers = nil, []byte{}, nil
	replayed := &item{rec: &noKey, view: &noKey, attempt: 1, srcTime: t0, replayOf: "orders-dlq/0/9", replayCount: 2}
	return map[string]*item{
		"source":   {rec: src, view: src, attempt: 1, srcTime: t0},
		"tier":     tier,
		"replayed": replayed,
	}
}

// TestGoldenRecords: the records written after a failure, to a retry tier, to the dead letter
// topic, without value and stripped, are byte for byte those of testdata/.
func TestGoldenRecords(t *testing.T) {
	at := time.Date(2026, 11, 26, 9, 31, 0, 0, time.UTC)
	fails := map[string]*failure{
		"http": {errorType: "HTTP503", message: "upstream busy", httpStatus: 503, rule: "transient", at: at},
		"dead": {reason: headers.ReasonNonRetriable, errorType: "Validation", message: "bad field\nline two", httpStatus: 422, rule: "reject", at: at},
		"long": {reason: headers.ReasonUndeliverable, errorType: string(bytes.Repeat([]byte("E"), 300)),
			message: string(bytes.Repeat([]byte("m"), 5000)), at: at},
	}
	for iname, it := range goldenItems() {
		for fname, f := range fails {
			name := iname + "-" + fname
			t.Run(name, func(t *testing.T) {
				if f.reason == "" {
					assertGolden(t, name+".retry.golden", dump(it.retryRecord("orders-retry-2", "ns/pipe", f, at.Add(4*time.Second))))
					return
				}
				dl := it.deadLetterRecord("orders-dlq", "group-a", "ns/pipe", it.attempt, f)
				assertGolden(t, name+".deadletter.golden", dump(dl))
				assertGolden(t, name+".novalue.golden", dump(noValueRecord(dl)))
				assertGolden(t, name+".stripped.golden", dump(it.strippedRecord(dl)))
				assertGolden(t, name+".stripped-novalue.golden", dump(it.strippedRecord(noValueRecord(dl))))
			})
		}
	}
}
