package dlqapi_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/sdk/headers"
)

// reasons are the dead letters' reasons, in turn: n-th dead letter has reasons[n%len].
var reasons = []string{headers.ReasonMaxRetriesExceeded, headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable, headers.ReasonDeadlineExceeded, headers.ReasonUndeliverable}

// rareReason is the reason of one dead letter in a hundred (the 100th, 200th, ...).
const rareReason = "poison_pill"

func reasonOf(i int) string {
	if i%100 == 99 {
		return rareReason
	}
	return reasons[i%len(reasons)]
}

// kafkaEnv is a kfake cluster holding one dead letter topic of n dead letters over parts
// partitions, and its state topic, reached through the franz factory.
type kafkaEnv struct {
	conn  kafka.Connection
	f     *franz.Factory
	topic string
	t0    time.Time
}

func newKafka(tb testing.TB, topic string, parts int32, n int, valueBytes int) *kafkaEnv {
	tb.Helper()
	state, _ := deadletters.StateTopic(topic)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parts, topic, state))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	e := &kafkaEnv{conn: kafka.Connection{BootstrapServers: c.ListenAddrs(), ClientID: "test"}, f: franz.NewFactory(franz.WithRequestTimeout(30 * time.Second)), topic: topic,
		t0: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	tb.Cleanup(e.f.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const batch = 2000
	for start := 0; start < n; start += batch {
		var recs []kafka.ProduceRecord
		for i := start; i < min(n, start+batch); i++ {
			recs = append(recs, e.record(i, int32(i)%parts, valueBytes))
		}
		res, err := e.f.ProduceRecords(ctx, e.conn, topic, recs)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				tb.Fatal(r.Err)
			}
		}
	}
	return e
}

// record is the i-th dead letter: its reason, error type, pipeline, attempts and failure times
// from i; its value text (or binary for every 97th).
func (e *kafkaEnv) record(i int, part int32, valueBytes int) kafka.ProduceRecord {
	value := fmt.Appendf(nil, `{"order":%d}`, i)
	for len(value) < valueBytes {
		value = append(value, ' ')
	}
	if i%97 == 0 {
		value = []byte{0xff, 0xfe, byte(i), byte(i >> 8)}
	}
	at := e.t0.Add(time.Duration(i) * time.Second)
	h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
	return kafka.ProduceRecord{
		Key:       []byte("order-" + strconv.Itoa(i)),
		Value:     value,
		Partition: part,
		Timestamp: at,
		Headers: []kafka.Header{
			h("trace-id", "t-"+strconv.Itoa(i)),
			h(headers.Reason, reasonOf(i)),
			h(headers.ErrorType, []string{"HTTP5xx", "Timeout", "HTTP4xx"}[i%3]),
			h(headers.ErrorMessage, "upstream said no to "+strconv.Itoa(i)),
			h(headers.HTTPStatus, "503"),
			h(headers.Pipeline, "shop/orders"),
			h(headers.ConsumerGroup, "orders-group"),
			h(headers.Attempts, strconv.Itoa(1+i%7)),
			h(headers.FirstFailure, headers.FormatTime(at.Add(-time.Minute))),
			h(headers.LastFailure, headers.FormatTime(at)),
			h(headers.OriginalTopic, "orders"),
			h(headers.OriginalPartition, strconv.Itoa(i%3)),
			h(headers.OriginalOffset, strconv.Itoa(i)),
			h(headers.OriginalTimestamp, headers.FormatTime(at.Add(-2*time.Minute))),
		},
	}
}

// scan reads the whole topic independently of the API: the IDs whose entry satisfies keep.
func (e *kafkaEnv) scan(tb testing.TB, keep func(deadletters.Entry) bool) map[deadletters.ID]bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := e.f.Admin(ctx, e.conn)
	if err != nil {
		tb.Fatal(err)
	}
	offs, err := admin.ListOffsets(ctx, e.topic)
	if err != nil {
		tb.Fatal(err)
	}
	ranges := map[int32]kafka.OffsetRange{}
	for _, p := range offs[e.topic] {
		ranges[p.Partition] = kafka.OffsetRange{From: p.Start, To: p.End}
	}
	out := map[deadletters.ID]bool{}
	if err := e.f.Scan(ctx, e.conn, map[string]map[int32]kafka.OffsetRange{e.topic: ranges}, func(r kafka.Record) {
		if en := deadletters.ParseEntry(r); keep(en) {
			out[en.ID] = true
		}
	}); err != nil {
		tb.Fatal(err)
	}
	return out
}
