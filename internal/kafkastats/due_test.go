package kafkastats

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// produceAt writes one record per timestamp to partition 0 of topic.
func produceAt(t *testing.T, f *kafkafake.Fake, topic string, at ...time.Time) {
	t.Helper()
	var recs []kafka.ProduceRecord
	for _, ts := range at {
		recs = append(recs, kafka.ProduceRecord{Partition: 0, Timestamp: ts})
	}
	if _, err := f.ProduceRecords(context.Background(), kafka.Connection{BootstrapServers: []string{"fake:9092"}}, topic, recs); err != nil {
		t.Fatal(err)
	}
}

// Two pipelines' tiers on one connection: one OffsetsAfter call per round, each tier at the round's
// time minus its own longest delay.
func TestDueOffsetsReadEveryTierAtItsOwnDelayInOneRound(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	fake := kafkafake.New()
	fake.AddTopic("slow", 1, 1, nil)
	fake.AddTopic("fast", 1, 1, nil)
	produceAt(t, fake, "slow", liveNow, liveNow.Add(time.Minute))
	produceAt(t, fake, "fast", liveNow, liveNow.Add(time.Minute))
	d := NewDueOffsets(clk)
	const interval = 30 * time.Second
	get := func(member, topic string, latest time.Duration) map[int32]int64 {
		got, _, err := d.Get(ctx, fake, "conn", member, map[string]time.Duration{topic: latest}, interval)
		g.Expect(err).NotTo(HaveOccurred())
		return offsetsOnly(got[topic])
	}
	g.Expect(get("a", "slow", 10*time.Minute)).To(Equal(map[int32]int64{0: 0}), "none due yet")
	g.Expect(get("b", "fast", time.Minute)).To(Equal(map[int32]int64{0: 0}))

	clk.SetTime(liveNow.Add(90 * time.Second))
	fake.ResetCalls()
	g.Expect(get("a", "slow", 10*time.Minute)).To(Equal(map[int32]int64{0: 0}), "a 10-minute tier: still waiting")
	g.Expect(get("b", "fast", time.Minute)).To(Equal(map[int32]int64{0: 1}), "a 1-minute tier: the first is due")
	g.Expect(fake.CallsTo(kafkafake.OffsetsAfter)).To(HaveLen(1), "one round for both pipelines")

	clk.SetTime(liveNow.Add(11 * time.Minute))
	g.Expect(get("a", "slow", 10*time.Minute)).To(Equal(map[int32]int64{0: -1}), "all due")
	g.Expect(get("b", "fast", time.Minute)).To(Equal(map[int32]int64{0: -1}))
}

func TestDueLag(t *testing.T) {
	for _, tc := range []struct {
		name      string
		offsets   []kafka.PartitionOffsets
		committed map[int32]int64
		dueEnd    map[int32]int64
		want      int64
	}{
		{"nothing due", offsets([2]int64{0, 10}), nil, map[int32]int64{0: 0}, 0},
		{"all due, never committed", offsets([2]int64{2, 10}), nil, map[int32]int64{0: -1}, 8},
		{"due up to 6, committed 4", offsets([2]int64{0, 10}), map[int32]int64{0: 4}, map[int32]int64{0: 6}, 2},
		{"committed past the due ones", offsets([2]int64{0, 10}), map[int32]int64{0: 8}, map[int32]int64{0: 6}, 0},
		{"a due end past the end is the end", offsets([2]int64{0, 10}), map[int32]int64{0: 3}, map[int32]int64{0: 12}, 7},
		{"a partition not read counts 0", offsets([2]int64{0, 10}, [2]int64{0, 5}), nil, map[int32]int64{0: -1}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(DueLag(tc.offsets, tc.committed, timed(tc.dueEnd))).To(Equal(tc.want))
		})
	}
}

func offsetsOnly(ps map[int32]kafka.TimedOffset) map[int32]int64 {
	out := make(map[int32]int64, len(ps))
	for p, o := range ps {
		out[p] = o.Offset
	}
	return out
}

// timed gives each offset a timestamp: the offset in seconds after liveNow (-1 for none).
func timed(ps map[int32]int64) map[int32]kafka.TimedOffset {
	out := make(map[int32]kafka.TimedOffset, len(ps))
	for p, o := range ps {
		ts := int64(-1)
		if o >= 0 {
			ts = liveNow.Add(time.Duration(o) * time.Second).UnixMilli()
		}
		out[p] = kafka.TimedOffset{Offset: o, Timestamp: ts}
	}
	return out
}

// The earliest a waiting record can come due: the first record not surely due's timestamp plus the
// tier's shortest delay, over the partitions where something waits for the group.
func TestEarliestWaiting(t *testing.T) {
	const earliest = time.Minute
	at := func(s int) time.Time { return liveNow.Add(time.Duration(s)*time.Second + earliest) }
	for _, tc := range []struct {
		name      string
		offsets   []kafka.PartitionOffsets
		committed map[int32]int64
		dueEnd    map[int32]int64
		want      time.Time
		ok        bool
	}{
		{"all due", offsets([2]int64{0, 10}), nil, map[int32]int64{0: -1}, time.Time{}, false},
		{"one waits from offset 6", offsets([2]int64{0, 10}), map[int32]int64{0: 4}, map[int32]int64{0: 6}, at(6), true},
		{"the earliest of two partitions", offsets([2]int64{0, 10}, [2]int64{0, 10}), nil, map[int32]int64{0: 7, 1: 3}, at(3), true},
		{"read to the end: nothing waits", offsets([2]int64{0, 10}), map[int32]int64{0: 10}, map[int32]int64{0: 6}, time.Time{}, false},
		{"a due end at the end without a record: nothing waits", offsets([2]int64{0, 10}), nil, nil, time.Time{}, false},
		// The offsets are read in their own batched round, up to a refresh apart from the due
		// offsets': a record the due read found past the end they know still waits.
		{"a due end past offsets read earlier", offsets([2]int64{0, 10}), map[int32]int64{0: 10}, map[int32]int64{0: 10}, at(10), true},
		{"a partition the offsets do not know yet", offsets([2]int64{0, 10}), map[int32]int64{0: 10}, map[int32]int64{0: -1, 1: 2}, at(2), true},
		{"read past a due end the offsets do not know", offsets([2]int64{0, 10}), map[int32]int64{0: 11}, map[int32]int64{0: 10}, time.Time{}, false},
		{"a partition not read is passed over", offsets([2]int64{0, 10}, [2]int64{0, 10}), nil, map[int32]int64{1: 5}, at(5), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dueEnd := timed(tc.dueEnd)
			if tc.dueEnd == nil {
				dueEnd = map[int32]kafka.TimedOffset{0: {Offset: 10, Timestamp: -1}}
			}
			got, ok := EarliestWaiting(tc.offsets, tc.committed, dueEnd, earliest)
			g.Expect(ok).To(Equal(tc.ok))
			g.Expect(got.Equal(tc.want)).To(BeTrue(), "got %s, want %s", got, tc.want)
		})
	}
}
