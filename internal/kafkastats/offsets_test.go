package kafkastats

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/internal/lease"
)

var liveNow = time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)

// offsets makes the offsets of partitions 0, 1, ... from their start and end.
func offsets(startEnd ...[2]int64) []kafka.PartitionOffsets {
	out := make([]kafka.PartitionOffsets, len(startEnd))
	for i, se := range startEnd {
		out[i] = kafka.PartitionOffsets{Partition: int32(i), Start: se[0], End: se[1]}
	}
	return out
}

// TestOffsetsCacheReadsAllTopicsOfAConnectionInOneRound proves the batching: queues on one connection
// share one ListOffsets call per refresh interval, a topic missing from the snapshot is listed alone,
// and a queue that leaves drops out of the next round.
func TestOffsetsCacheReadsAllTopicsOfAConnectionInOneRound(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	fake := kafkafake.New()
	for _, name := range []string{"a", "b", "c", "late"} {
		fake.AddTopic(name, 2, 1, nil)
	}
	fake.Produce("b", 1, 4)
	c := NewOffsets(clk)
	q := func(n string) string { return "DeadLetterQueue/ns/" + n }
	const interval = 30 * time.Second

	// The first reads register the queues; each finds the snapshot missing its topic or stale.
	for _, n := range []string{"a", "b", "c"} {
		_, _, err := c.Get(ctx, fake, "conn", q(n), []string{n}, interval)
		g.Expect(err).NotTo(HaveOccurred())
	}
	fake.ResetCalls()

	// One interval later, the first queue refreshes for all; the others read the snapshot.
	clk.SetTime(clk.Now().Add(interval))
	for _, n := range []string{"a", "b", "c"} {
		po, at, err := c.Get(ctx, fake, "conn", q(n), []string{n}, interval)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(at).To(Equal(clk.Now()))
		if n == "b" {
			g.Expect(CountMessages(po["b"])).To(Equal(int64(4)))
		}
	}
	calls := fake.CallsTo(kafkafake.ListOffsets)
	g.Expect(calls).To(HaveLen(1), "one round for three queues")
	g.Expect(calls[0].Args).To(ConsistOf(ConsistOf("a", "b", "c")))

	// A new queue within the interval lists its own topic alone.
	fake.ResetCalls()
	_, _, err := c.Get(ctx, fake, "conn", q("late"), []string{"late"}, interval)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fake.CallsTo(kafkafake.ListOffsets)).To(ConsistOf(HaveField("Args", ConsistOf(ConsistOf("late")))))

	// A queue that goes is not listed any more; another connection is a separate round.
	c.Forget(q("c"))
	fake.ResetCalls()
	clk.SetTime(clk.Now().Add(interval))
	for _, n := range []string{"a", "b", "late"} {
		_, _, err := c.Get(ctx, fake, "conn", q(n), []string{n}, interval)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(fake.CallsTo(kafkafake.ListOffsets)).To(ConsistOf(HaveField("Args", ConsistOf(ConsistOf("a", "b", "late")))))

	// Set makes a change this operator made visible without asking Kafka.
	c.Set("conn", "a", offsets([2]int64{0, 0}, [2]int64{0, 0}))
	fake.ResetCalls()
	po, _, err := c.Get(ctx, fake, "conn", q("a"), []string{"a"}, interval)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(po["a"]).To(HaveLen(2))
	g.Expect(fake.CallCount(kafkafake.ListOffsets)).To(Equal(0))

	// An error reaches every reader and is not cached.
	clk.SetTime(clk.Now().Add(interval))
	fake.FailNext(kafkafake.ListOffsets, kafka.ErrUnreachable)
	_, _, err = c.Get(ctx, fake, "conn", q("a"), []string{"a"}, interval)
	g.Expect(errors.Is(err, kafka.ErrUnreachable)).To(BeTrue())
	_, _, err = c.Get(ctx, fake, "conn", q("a"), []string{"a"}, interval)
	g.Expect(err).NotTo(HaveOccurred())

	// A round refused for lack of authorisation (an ACL on one topic fails the whole request) falls
	// back to listing the reader's own topic, so the other queues are not affected.
	clk.SetTime(clk.Now().Add(interval))
	fake.ResetCalls()
	fake.FailNext(kafkafake.ListOffsets, kafka.ErrAuth)
	po, _, err = c.Get(ctx, fake, "conn", q("b"), []string{"b"}, interval)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(CountMessages(po["b"])).To(Equal(int64(4)))
	g.Expect(fake.CallsTo(kafkafake.ListOffsets)).To(HaveLen(2))
	g.Expect(fake.CallsTo(kafkafake.ListOffsets)[1].Args).To(ConsistOf(ConsistOf("b")))
}

func TestGroupLag(t *testing.T) {
	for name, tc := range map[string]struct {
		offsets   []kafka.PartitionOffsets
		committed map[int32]int64
		want      int64
	}{
		"committed partitions: end minus commit":                {offsets: offsets([2]int64{0, 10}, [2]int64{0, 20}), committed: map[int32]int64{0: 4, 1: 20}, want: 6},
		"never committed: end minus start":                      {offsets: offsets([2]int64{3, 10}, [2]int64{0, 5}), committed: map[int32]int64{1: 5}, want: 7},
		"a group that never committed: everything held":         {offsets: offsets([2]int64{2, 10}, [2]int64{0, 5}), want: 13},
		"a commit below the start counts from the start":        {offsets: offsets([2]int64{8, 10}), committed: map[int32]int64{0: 3}, want: 2},
		"a commit past the end (topic recreated) counts 0":      {offsets: offsets([2]int64{0, 4}), committed: map[int32]int64{0: 9}, want: 0},
		"a missing topic counts 0":                              {committed: map[int32]int64{0: 9}, want: 0},
		"commits of partitions the topic no longer has ignored": {offsets: offsets([2]int64{0, 4}), committed: map[int32]int64{0: 4, 7: 1}, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(GroupLag(tc.offsets, tc.committed)).To(Equal(tc.want))
		})
	}
}

func TestUntilNextRound(t *testing.T) {
	const interval = 30 * time.Second
	for name, tc := range map[string]struct {
		taken time.Time
		want  time.Duration
	}{
		"no snapshot yet: one interval":                           {want: interval},
		"a snapshot just taken: just after it goes stale":         {taken: liveNow, want: interval + roundSlack - 0},
		"a snapshot 10s old: 20s and the slack":                   {taken: liveNow.Add(-10 * time.Second), want: 20*time.Second + roundSlack},
		"stale already (its round is under way): the next one":    {taken: liveNow.Add(-interval - time.Second), want: interval - time.Second + roundSlack},
		"due within a tenth of the interval: the following round": {taken: liveNow.Add(-interval + time.Second), want: time.Second + roundSlack + interval},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got := untilNextRound(liveNow, tc.taken, interval)
			g.Expect(got).To(Equal(min(tc.want, interval)))
			g.Expect(got).To(BeNumerically(">=", interval/10))
		})
	}
}

func TestSpreadIsFixedPerMemberWithinATenthAndNeverPastTheInterval(t *testing.T) {
	g := NewWithT(t)
	const interval = 30 * time.Second
	seen := map[time.Duration]bool{}
	for i := range 1000 {
		member := fmt.Sprintf("DeadLetterQueue/team-%d/orders", i)
		d := Spread(member, interval)
		g.Expect(d).To(BeNumerically(">=", 0))
		g.Expect(d).To(BeNumerically("<", interval/10))
		g.Expect(Spread(member, interval)).To(Equal(d), "the same member, the same share")
		seen[d.Truncate(100*time.Millisecond)] = true
	}
	// 1,000 members over 30 slots of 100ms: all but a few slots taken, not one instant.
	g.Expect(len(seen)).To(BeNumerically(">=", 25))
	g.Expect(Spread("x", 0)).To(BeZero())

	// After a round: each member comes back after the round goes stale, spread, and never more
	// than one interval after its reconcile, whenever in the interval that was.
	clk := clocktesting.NewFakeClock(liveNow)
	o := NewOffsets(clk)
	_, _, err := o.Get(context.Background(), kafkafake.New(), "conn", "m", []string{"t"}, interval)
	g.Expect(err).NotTo(HaveOccurred())
	for _, since := range []time.Duration{0, time.Second, 10 * time.Second, 29 * time.Second} {
		clk.SetTime(liveNow.Add(since))
		at := map[time.Duration]bool{}
		for i := range 200 {
			d := o.UntilNextRound("conn", fmt.Sprintf("ConsumerPipeline/ns/p%d", i), interval)
			g.Expect(d).To(BeNumerically("<=", interval), "looked at again within one interval")
			g.Expect(d).To(BeNumerically(">=", interval/10))
			at[(since + d).Truncate(time.Second)] = true
		}
		if since == 10*time.Second {
			g.Expect(len(at)).To(BeNumerically(">=", 3), "spread over the first tenth after the round, not one instant")
		}
	}
}

// TestAMemberThatStopsReadingLeavesByItself: a resource deleted reads no more; once its lease
// (lease.For of its interval) is over, the rounds stop reading its keys and a connection left
// without members goes, with no Forget.
func TestAMemberThatStopsReadingLeavesByItself(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(liveNow)
	fake := kafkafake.New()
	for _, n := range []string{"a", "gone", "alone"} {
		fake.AddTopic(n, 1, 1, nil)
	}
	c := NewOffsets(clk)
	const interval = time.Minute
	get := func(conn, member, topic string) {
		t.Helper()
		_, _, err := c.Get(ctx, fake, conn, member, []string{topic}, interval)
		g.Expect(err).NotTo(HaveOccurred())
	}
	get("conn", "a", "a")
	get("conn", "gone", "gone")
	get("other", "alone", "alone")
	for clk.Now().Before(liveNow.Add(lease.For(interval) + lease.Min)) {
		clk.SetTime(clk.Now().Add(interval))
		get("conn", "a", "a")
	}
	fake.ResetCalls()
	clk.SetTime(clk.Now().Add(interval))
	get("conn", "a", "a")
	g.Expect(fake.CallsTo(kafkafake.ListOffsets)).To(ConsistOf(HaveField("Args", ConsistOf(ConsistOf("a")))), "gone is no longer read")
	c.reads.mu.Lock()
	defer c.reads.mu.Unlock()
	g.Expect(c.reads.member).To(HaveLen(1))
	g.Expect(c.reads.groups).NotTo(HaveKey("other"), "a connection left without members goes")
	g.Expect(c.reads.leases.Len()).To(Equal(1))
}
