package kafkastats

import (
	"context"
	"hash/fnv"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Offsets batches the offset reads of every resource on one connection: a refresh lists the start
// and end offsets of all their topics (the queues' dead letter topics, the pipelines' sources and
// retry tiers) in one ListOffsets round (one request for the start offsets and one for the end
// offsets per partition leader; on a single broker, exactly two), and the resources that resync
// within the same refresh interval read that snapshot instead of asking Kafka again. So a resync
// costs one round per connection, not one per topic.
//
// Whichever read first finds the snapshot older than its refresh interval refreshes it; the others
// that arrive meanwhile wait for that refresh (single flight). A resource whose topics are not in
// the snapshot yet (just created, or just claimed) has them listed alone and merged in, so that new
// resources do not force a full round. The snapshot is therefore at most one interval old.
//
// Resources are members named by the caller ("DeadLetterQueue/<namespace>/<name>", say).
type Offsets struct {
	reads *batchedReads[[]kafka.PartitionOffsets]
}

// NewOffsets returns an empty Offsets reading the time from clk.
func NewOffsets(clk clock.PassiveClock) *Offsets {
	return &Offsets{reads: newBatchedReads(clk, func(ctx context.Context, admin kafka.Admin, topics []string) (map[string][]kafka.PartitionOffsets, error) {
		return admin.ListOffsets(ctx, topics...)
	})}
}

// Get returns the offsets of topics, read for member over the connection connKey (admin is its
// client), no older than maxAge, and when they were read. A topic that does not exist has no
// offsets (nil).
func (o *Offsets) Get(ctx context.Context, admin kafka.Admin, connKey, member string, topics []string, maxAge time.Duration) (map[string][]kafka.PartitionOffsets, time.Time, error) {
	return o.reads.Get(ctx, admin, connKey, member, topics, maxAge)
}

// Set replaces the offsets of topic in the snapshot of connKey, after this operator changed them
// (created the topic, deleted records), so that the next readers see the change.
func (o *Offsets) Set(connKey, topic string, po []kafka.PartitionOffsets) {
	o.reads.Set(connKey, topic, slices.Clone(po))
}

// Peek returns the offsets of topic in the snapshot of connKey and when the snapshot was taken,
// without asking Kafka; ok is false when the snapshot does not hold the topic.
func (o *Offsets) Peek(connKey, topic string) (po []kafka.PartitionOffsets, taken time.Time, ok bool) {
	return o.reads.Peek(connKey, topic)
}

// UntilNextRound is when member, a resource of connection connKey refreshed every interval, should
// resync next: just after the connection's snapshot goes stale, plus its own share of the spread
// (Spread), never later than one interval from now. Resources that resync out of phase with the
// rounds read a snapshot up to an interval old, so a change could take two intervals to show;
// aligned, the first of them starts the round and the others read it fresh, so every figure shows
// within one interval, and there is still one round per interval. Without a snapshot it is interval.
func (o *Offsets) UntilNextRound(connKey, member string, interval time.Duration) time.Duration {
	_, taken, _ := o.reads.Peek(connKey, "")
	return min(untilNextRound(o.reads.clock.Now(), taken, interval)+Spread(member, interval), interval)
}

// Spread is how long after a round member resyncs: a share of the first tenth of the interval,
// fixed per member (a hash of its name). Aligned on the round alone, every resource of a
// connection would resync at the same instant, 10,000 of them flooding the manager's work queue and
// the API server at once; spread, they still read the round's snapshot (taken by the first of
// them, fresh for a whole interval). Capped at one interval from the reconcile (UntilNextRound), a
// resource reconciled just after a round comes back one interval later, which spreads those by
// the time they were reconciled.
func Spread(member string, interval time.Duration) time.Duration {
	window := interval / 10
	if window <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	return time.Duration(h.Sum64() % uint64(window))
}

// roundSlack is how long after a snapshot goes stale the aligned resyncs come, so that the first of
// them finds it stale for sure.
const roundSlack = 20 * time.Millisecond

// untilNextRound is the wait from now until just after the snapshot taken at taken goes stale,
// never under a tenth of the interval (that round is under way: take the next one) nor over it.
func untilNextRound(now, taken time.Time, interval time.Duration) time.Duration {
	if taken.IsZero() {
		return interval
	}
	d := taken.Add(interval + roundSlack).Sub(now)
	for d < interval/10 {
		d += interval
	}
	return min(d, interval)
}

// Forget removes member from every snapshot group; a group left without members is dropped.
func (o *Offsets) Forget(member string) {
	o.reads.Forget(member)
}

// CountMessages is the number of records held: end minus start, summed over partitions.
func CountMessages(offsets []kafka.PartitionOffsets) int64 {
	var n int64
	for _, o := range offsets {
		if o.End > o.Start && o.Start >= 0 {
			n += o.End - o.Start
		}
	}
	return n
}

// GroupLag is the number of records of a topic a consumer group has still to read: on each
// partition, the end offset minus the committed offset; where the group never committed, the end
// minus the start offset (a consumer then starts from the earliest record, franz-go's default
// reset). A commit below the start offset counts from the start (the records below were deleted
// unread: no consumer will read them), one past the end counts 0. A topic that does not exist (no
// offsets) counts 0.
func GroupLag(offsets []kafka.PartitionOffsets, committed map[int32]int64) int64 {
	var lag int64
	for _, o := range offsets {
		from := o.Start
		if c, ok := committed[o.Partition]; ok && c > from {
			from = c
		}
		if o.End > from {
			lag += o.End - from
		}
	}
	return lag
}

// Members is the number of resources whose reads are batched.
func (o *Offsets) Members() int { return o.reads.members() }
