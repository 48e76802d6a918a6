package kafkastats

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/lease"
)

// fakeScanner serves records from memory: topic -> partition -> records by offset.
type fakeScanner struct {
	records map[string]map[int32][]kafka.Record
	calls   []map[string]map[int32]kafka.OffsetRange
	err     error
}

func (f *fakeScanner) produce(topic string, partition int32, reasons ...string) {
	if f.records == nil {
		f.records = map[string]map[int32][]kafka.Record{}
	}
	if f.records[topic] == nil {
		f.records[topic] = map[int32][]kafka.Record{}
	}
	for _, reason := range reasons {
		rs := f.records[topic][partition]
		f.records[topic][partition] = append(rs, kafka.Record{
			Topic: topic, Partition: partition, Offset: int64(len(rs)), Timestamp: liveNow.Add(time.Duration(len(rs)) * time.Second),
			Headers: []kafka.Header{{Key: HeaderReason, Value: []byte(reason)}},
		})
	}
}

func (f *fakeScanner) Scan(_ context.Context, _ kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	f.calls = append(f.calls, ranges)
	if f.err != nil {
		return f.err
	}
	for topic, parts := range ranges {
		for p, r := range parts {
			for _, rec := range f.records[topic][p] {
				if rec.Offset >= r.From && rec.Offset < r.To {
					fn(rec)
				}
			}
		}
	}
	return nil
}

func (f *fakeScanner) ends(topic string, partitions int32) []kafka.PartitionOffsets {
	out := make([]kafka.PartitionOffsets, partitions)
	for p := range partitions {
		out[p] = kafka.PartitionOffsets{Partition: p, End: int64(len(f.records[topic][p]))}
	}
	return out
}

// TestDeadLetterTalliesScanOncePerRefreshForAllQueues proves the batching of the reads: the first
// queue with new records reads those of every queue of the connection in one scan; the others, and
// a refresh with nothing new, read nothing; trimmed records leave the counts without a read; a
// failed scan is not repeated for the same offsets.
func TestDeadLetterTalliesScanOncePerRefreshForAllQueues(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	offsets := NewOffsets(clk)
	sc := &fakeScanner{}
	tallies := NewTallies(offsets, sc)
	q := func(n string) string { return "DeadLetterQueue/ns/" + n }
	conn := kafka.Connection{BootstrapServers: []string{"k:9092"}}

	// Both queues are known to the offsets snapshot (as after a ListOffsets round).
	sc.produce("a", 0, "max_retries_exceeded", "max_retries_exceeded", "undeliverable")
	sc.produce("b", 1, "deadline_exceeded")
	primeSnapshot(offsets, "conn", clk.Now(), map[string][]kafka.PartitionOffsets{"a": sc.ends("a", 2), "b": sc.ends("b", 2)})

	ba, err := tallies.Breakdown(ctx, conn, "conn", q("a"), "a", sc.ends("a", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ba.Messages).To(Equal(int64(3)))
	g.Expect(ba.Reasons).To(Equal([]Count{{Name: "max_retries_exceeded", Count: 2}, {Name: "undeliverable", Count: 1}}))
	g.Expect(sc.calls).To(HaveLen(1))
	// b is not a member yet: only a's records were read.
	g.Expect(sc.calls[0]).To(HaveKey("a"))

	bb, err := tallies.Breakdown(ctx, conn, "conn", q("b"), "b", sc.ends("b", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bb.Messages).To(Equal(int64(1)))
	g.Expect(sc.calls).To(HaveLen(2))

	// Next refresh: new records in both; the first queue reads both topics in one scan, the second
	// reads nothing.
	clk.SetTime(clk.Now().Add(time.Minute))
	sc.produce("a", 1, "undeliverable")
	sc.produce("b", 1, "deadline_exceeded", "deadline_exceeded")
	primeSnapshot(offsets, "conn", clk.Now(), map[string][]kafka.PartitionOffsets{"a": sc.ends("a", 2), "b": sc.ends("b", 2)})
	sc.calls = nil
	ba, err = tallies.Breakdown(ctx, conn, "conn", q("a"), "a", sc.ends("a", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ba.Messages).To(Equal(int64(4)))
	g.Expect(sc.calls).To(HaveLen(1))
	g.Expect(sc.calls[0]).To(Equal(map[string]map[int32]kafka.OffsetRange{
		"a": {1: {From: 0, To: 1}},
		"b": {1: {From: 1, To: 3}},
	}), "only the new records, of both queues")
	bb, err = tallies.Breakdown(ctx, conn, "conn", q("b"), "b", sc.ends("b", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bb.Reasons).To(Equal([]Count{{Name: "deadline_exceeded", Count: 3}}))
	g.Expect(sc.calls).To(HaveLen(1), "b's records were read by a's scan")

	// Nothing new: nothing read.
	clk.SetTime(clk.Now().Add(time.Minute))
	_, err = tallies.Breakdown(ctx, conn, "conn", q("a"), "a", sc.ends("a", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sc.calls).To(HaveLen(1))

	// Trimmed records leave the counts without a read.
	trimmed := sc.ends("a", 2)
	trimmed[0].Start = 2
	ba, err = tallies.Breakdown(ctx, conn, "conn", q("a"), "a", trimmed, clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ba.Reasons).To(Equal([]Count{{Name: "undeliverable", Count: 2}}))
	g.Expect(sc.calls).To(HaveLen(1))

	// A failed scan returns its error to every queue refreshing from the same offsets, without
	// scanning again; the next snapshot tries again.
	clk.SetTime(clk.Now().Add(time.Minute))
	sc.produce("a", 0, "undeliverable")
	sc.produce("b", 0, "undeliverable")
	primeSnapshot(offsets, "conn", clk.Now(), map[string][]kafka.PartitionOffsets{"a": sc.ends("a", 2), "b": sc.ends("b", 2)})
	sc.calls, sc.err = nil, errors.New("TOPIC_AUTHORIZATION_FAILED")
	_, err = tallies.Breakdown(ctx, conn, "conn", q("a"), "a", sc.ends("a", 2), clk.Now(), time.Minute)
	g.Expect(err).To(MatchError(ContainSubstring("TOPIC_AUTHORIZATION_FAILED")))
	_, err = tallies.Breakdown(ctx, conn, "conn", q("b"), "b", sc.ends("b", 2), clk.Now(), time.Minute)
	g.Expect(err).To(HaveOccurred())
	g.Expect(sc.calls).To(HaveLen(1))
	clk.SetTime(clk.Now().Add(time.Minute))
	sc.err = nil
	bb, err = tallies.Breakdown(ctx, conn, "conn", q("b"), "b", sc.ends("b", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bb.Messages).To(Equal(int64(4)))

	// A queue that moves to another connection starts afresh; one that stops asking (deleted) goes
	// by itself once its lease is over, while one that keeps asking stays.
	bb, err = tallies.Breakdown(ctx, conn, "other", q("b"), "b", sc.ends("b", 2), clk.Now(), time.Minute)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bb.Messages).To(Equal(int64(4)), "counted again from the start")
	for range 3 {
		clk.SetTime(clk.Now().Add(lease.Min))
		primeSnapshot(offsets, "conn", clk.Now(), map[string][]kafka.PartitionOffsets{"a": sc.ends("a", 2)})
		_, err = tallies.Breakdown(ctx, conn, "conn", q("a"), "a", sc.ends("a", 2), clk.Now(), time.Minute)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(tallies.groups).NotTo(HaveKey("other"), "b stopped asking")
	g.Expect(tallies.member).To(HaveKey(q("a")))
	g.Expect(tallies.groups["conn"].queues).To(HaveKey(q("a")))
	g.Expect(tallies.groups["conn"].queues).NotTo(HaveKey(q("b")), "b left conn when it moved")
}

// primeSnapshot installs a snapshot of the offsets of topics on connKey taken at at, as a round
// would.
func primeSnapshot(c *Offsets, connKey string, at time.Time, topics map[string][]kafka.PartitionOffsets) {
	b := c.reads
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[connKey]
	if g == nil {
		g = &readGroup[[]kafka.PartitionOffsets]{keys: map[string][]string{}}
		b.groups[connKey] = g
	}
	g.snapshot, g.taken = map[string][]kafka.PartitionOffsets{}, at
	for t, po := range topics {
		g.snapshot[t] = po
	}
}

// TestATallyRenewedThroughAnOutageIsNotCountedAgain: while Kafka is unreachable the queues reconcile
// but read no offsets, so no Breakdown renews their tallies; the reconcile renews them (Renew), and
// once Kafka is back with nothing new no queue scans its topic again.
func TestATallyRenewedThroughAnOutageIsNotCountedAgain(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	offsets := NewOffsets(clk)
	sc := &fakeScanner{}
	tallies := NewTallies(offsets, sc)
	q := func(n string) string { return "DeadLetterQueue/ns/" + n }
	conn := kafka.Connection{BootstrapServers: []string{"k:9092"}}
	const interval = 30 * time.Second
	sc.produce("a", 0, "x", "x", "x")
	sc.produce("b", 0, "y", "y", "y")
	refresh := func() {
		t.Helper()
		primeSnapshot(offsets, "conn", clk.Now(), map[string][]kafka.PartitionOffsets{"a": sc.ends("a", 1), "b": sc.ends("b", 1)})
		for _, n := range []string{"a", "b"} {
			_, err := tallies.Breakdown(ctx, conn, "conn", q(n), n, sc.ends(n, 1), clk.Now(), interval)
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	refresh()
	for end := clk.Now().Add(2 * lease.Min); clk.Now().Before(end); {
		clk.SetTime(clk.Now().Add(interval))
		tallies.Renew(q("a"), clk.Now(), interval)
		tallies.Renew(q("b"), clk.Now(), interval)
	}
	sc.calls = nil
	refresh()
	g.Expect(sc.calls).To(BeEmpty(), "nothing new after the outage: no tally counted again")
	g.Expect(tallies.Members()).To(Equal(2))
}
