package franz

import (
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// OffsetsAfter finds, per partition, the first record at or after each topic's own time, in one
// ListOffsets request for all topics on a single broker; -1 where every record is older.
func TestOffsetsAfterEachTopicAtItsOwnTime(t *testing.T) {
	g := gomega.NewWithT(t)
	c := newCluster(t, seedTopics(2, "a"), seedTopics(1, "b"))
	conn := plainConn(c)
	admin, f := newAdmin(t, conn)
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(p int32, secs ...int) []kafka.ProduceRecord {
		var out []kafka.ProduceRecord
		for _, s := range secs {
			out = append(out, kafka.ProduceRecord{Value: []byte("v"), Partition: p, Timestamp: t0.Add(time.Duration(s) * time.Second)})
		}
		return out
	}
	for topic, recs := range map[string][]kafka.ProduceRecord{
		"a": append(at(0, 0, 1, 2, 3, 4), at(1, 0, 1)...),
		"b": at(0, 10, 20, 30),
	} {
		_, err := f.ProduceRecords(ctxT(t), conn, topic, recs)
		g.Expect(err).NotTo(gomega.HaveOccurred())
	}

	rc := countRequests(c, kmsg.ListOffsets)
	got, err := admin.OffsetsAfter(ctxT(t), map[string]time.Time{
		"a":       t0.Add(2 * time.Second),
		"b":       t0.Add(15 * time.Second),
		"missing": t0,
	})
	g.Expect(err).NotTo(gomega.HaveOccurred())
	ms := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	none := kafka.TimedOffset{Offset: -1, Timestamp: -1}
	g.Expect(got).To(gomega.Equal(map[string]map[int32]kafka.TimedOffset{
		"a": {0: {Offset: 2, Timestamp: ms(2 * time.Second)}, 1: none},
		"b": {0: {Offset: 1, Timestamp: ms(20 * time.Second)}},
	}), "each offset with the timestamp of its record")
	g.Expect(rc.get(kmsg.ListOffsets)).To(gomega.Equal(1), "one ListOffsets request for every topic, each at its own time")
}
