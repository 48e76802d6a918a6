package controllers

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// This file holds what the live figures in status are read with, each batched per Kafka connection
// like the offsets (deadletterqueue_offsets.go), so that one refresh of every resource on a
// connection costs a constant number of Kafka requests whatever the number of topics:
//
//   - one ListOffsets round for the start and end offsets of every topic (offsetsCache);
//   - one OffsetFetch round for the commits of every pipeline's consumer group (groupCommits);
//   - one Scan, that is one consumer client and as few Fetch requests as the new records need, for
//     the dead letters that arrived in every queue since the last refresh (deadLetterTallies); none
//     when nothing arrived.

// liveFigures is the state behind the live figures of DeadLetterQueues and ConsumerPipelines: the
// batched reads, the queues' growth history and per-pipeline counts, and the operator's gauges.
type liveFigures struct {
	clock   clock.PassiveClock
	tallies *deadLetterTallies
	commits *groupCommits
	metrics *opmetrics.Metrics

	mu sync.Mutex
	// growth is the message count history of each queue, for the growth rate.
	growth map[types.NamespacedName]*growthSamples
	// byPipeline is each queue's count of dead letters by pipeline as last written to its status,
	// complete (status.pipelines shows the 20 largest only).
	byPipeline map[types.NamespacedName]map[string]int64
}

func newLiveFigures(clk clock.PassiveClock, offsets *offsetsCache, scanner recordScanner, metrics *opmetrics.Metrics) *liveFigures {
	return &liveFigures{
		clock:      clk,
		tallies:    newDeadLetterTallies(offsets, scanner),
		commits:    newGroupCommits(clk),
		metrics:    metrics,
		growth:     map[types.NamespacedName]*growthSamples{},
		byPipeline: map[types.NamespacedName]map[string]int64{},
	}
}

// recordScanner reads ranges of records; *kafka.Factory is one.
type recordScanner interface {
	Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(*kgo.Record)) error
}

var _ recordScanner = (*kafka.Factory)(nil)

// groupCommits batches the committed offsets of the consumer groups of every pipeline on one
// connection into one OffsetFetch round per refresh (Kafka answers for many groups in one request per
// group coordinator).
type groupCommits struct {
	reads *batchedReads[kafka.GroupOffsets]
}

func newGroupCommits(c clock.PassiveClock) *groupCommits {
	return &groupCommits{reads: newBatchedReads(c, func(ctx context.Context, admin kafka.Admin, groups []string) (map[string]kafka.GroupOffsets, error) {
		got, err := admin.GroupOffsets(ctx, groups...)
		if err == nil || got == nil {
			return got, err
		}
		// Some groups failed. Unless all did (the broker is unreachable, say: not worth caching for an
		// interval), the round stands and each group's error reaches its own pipeline only.
		for _, g := range got {
			if g.Err == nil {
				return got, nil
			}
		}
		return nil, err
	})}
}

// Committed returns the offsets group committed, read for member (a pipeline's connection registry
// owner) over the connection connKey, no older than maxAge.
func (c *groupCommits) Committed(ctx context.Context, admin kafka.Admin, connKey, member, group string, maxAge time.Duration) (kafka.GroupOffsets, error) {
	got, _, err := c.reads.Get(ctx, admin, connKey, member, []string{group}, maxAge)
	if err != nil {
		return kafka.GroupOffsets{}, err
	}
	g := got[group]
	return g, g.Err
}

// Forget drops member from the rounds.
func (c *groupCommits) Forget(member string) { c.reads.Forget(member) }

// deadLetterTallies keeps one kafka.Tally per DeadLetterQueue: the breakdown of the records its
// topic holds by reason, error type and pipeline, with their times. A refresh reads only the records
// added since the last one, and records that left the topic (trimmed by retention.maxMessages,
// expired by retention.maxAge) leave the counts as the start offset passes them. The reading is
// batched: the first queue of a connection that finds records to read scans, with one consumer
// client, the new records of every queue of the connection whose offsets the offsets snapshot holds;
// the queues that refresh after it find nothing left to read.
//
// A tally lives as long as its queue uses the same connection and topic; a topic deleted and
// recreated is noticed by its offsets (kafka.Tally.Plan) and counted afresh.
type deadLetterTallies struct {
	offsets     *offsetsCache
	scanner     recordScanner
	scanTimeout time.Duration

	mu     sync.Mutex
	groups map[string]*tallyGroup // by kafka.Connection.Key
	member map[types.NamespacedName]string

	// scans and scanned count the scans made and the records they read, for tests.
	scans, scanned atomic.Int64
}

// defaultScanTimeout bounds one scan, and so how long the queues of a connection wait for their
// breakdown when the scan cannot finish (a partition that went away under it). A scan cut short
// keeps what it read; the next refresh goes on from there, so even a first read of a large queue
// completes over a few refreshes.
const defaultScanTimeout = 10 * time.Second

// tallyGroup is the tallies of one connection.
type tallyGroup struct {
	queues   map[types.NamespacedName]*queueTally
	inflight chan struct{} // closed when the scan under way ends
	// failedAt and failure are the snapshot time and error of the last scan if it failed: the queues
	// refreshing from the same snapshot get the error instead of scanning again.
	failedAt time.Time
	failure  error
}

// queueTally is one queue's tally.
type queueTally struct {
	topic string
	tally *kafka.Tally
	// plannedAt is the time of the offsets the tally was last brought up to.
	plannedAt time.Time

	// The breakdown last computed and the offsets it was computed for; dirty when records were added
	// since.
	breakdown kafka.Breakdown
	computed  []kafka.PartitionOffsets
	dirty     bool
}

func newDeadLetterTallies(offsets *offsetsCache, scanner recordScanner) *deadLetterTallies {
	return &deadLetterTallies{
		offsets: offsets, scanner: scanner, scanTimeout: defaultScanTimeout,
		groups: map[string]*tallyGroup{}, member: map[types.NamespacedName]string{},
	}
}

// Breakdown brings the tally of the queue who (topic on connection conn, whose key is connKey) up to
// the offsets po, read at time at, and returns its breakdown (every name, unbounded). When records
// had to be read and the scan failed, the breakdown is what could be read, and the error is
// returned with it.
func (t *deadLetterTallies) Breakdown(ctx context.Context, conn kafka.Connection, connKey string, who types.NamespacedName, topic string, po []kafka.PartitionOffsets, at time.Time) (kafka.Breakdown, error) {
	for {
		t.mu.Lock()
		g, q := t.join(connKey, who, topic)
		if ch := g.inflight; ch != nil {
			t.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return kafka.Breakdown{}, ctx.Err()
			}
			continue
		}
		var ranges map[int32]kafka.OffsetRange
		if !at.Before(q.plannedAt) { // never go back to older offsets than the tally has seen
			ranges = q.tally.Plan(po)
			q.plannedAt = at
		}
		if len(ranges) == 0 {
			b := q.currentBreakdown(po)
			t.mu.Unlock()
			return b, nil
		}
		if g.failure != nil && !at.After(g.failedAt) {
			err := g.failure
			b := q.currentBreakdown(po)
			t.mu.Unlock()
			return b, err
		}
		all, byTopic := t.planRound(connKey, g, who, q, ranges)
		done := make(chan struct{})
		g.inflight = done
		t.mu.Unlock()

		// The scan serves every queue of the connection: it must not end with this caller's context.
		// While it runs, the tallies it feeds are its own: everyone else waits for done.
		scanCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.scanTimeout)
		var read int64
		err := t.scanner.Scan(scanCtx, conn, all, func(r *kgo.Record) {
			read++
			for _, qt := range byTopic[r.Topic] {
				qt.tally.Add(r)
			}
		})
		cancel()
		t.scans.Add(1)
		t.scanned.Add(read)

		t.mu.Lock()
		g.inflight = nil
		close(done)
		for _, qs := range byTopic {
			for _, qt := range qs {
				qt.dirty = true
			}
		}
		g.failedAt, g.failure = time.Time{}, nil
		if err != nil {
			g.failedAt, g.failure = at, err
			if len(q.tally.Plan(po)) == 0 {
				err = nil // this queue's own records were all read: the failure is another's
			}
		}
		b := q.currentBreakdown(po)
		t.mu.Unlock()
		return b, err
	}
}

// planRound returns the ranges of one scan: those of the queue who (ranges), and those of every
// other queue of the group whose topic the offsets snapshot holds at least as new as its tally.
// byTopic gives the tallies fed by each topic. t.mu must be held.
func (t *deadLetterTallies) planRound(connKey string, g *tallyGroup, who types.NamespacedName, q *queueTally, ranges map[int32]kafka.OffsetRange) (map[string]map[int32]kafka.OffsetRange, map[string][]*queueTally) {
	all := map[string]map[int32]kafka.OffsetRange{}
	byTopic := map[string][]*queueTally{}
	add := func(qt *queueTally, rs map[int32]kafka.OffsetRange) {
		byTopic[qt.topic] = append(byTopic[qt.topic], qt)
		if all[qt.topic] == nil {
			all[qt.topic] = map[int32]kafka.OffsetRange{}
		}
		for p, r := range rs {
			if have, ok := all[qt.topic][p]; ok { // two queues on one topic: read the union
				r = kafka.OffsetRange{From: min(r.From, have.From), To: max(r.To, have.To)}
			}
			all[qt.topic][p] = r
		}
	}
	add(q, ranges)
	for other, qt := range g.queues {
		if other == who {
			continue
		}
		po, taken, ok := t.offsets.Peek(connKey, qt.topic)
		if !ok || taken.Before(qt.plannedAt) {
			continue
		}
		rs := qt.tally.Plan(po)
		qt.plannedAt = taken
		if len(rs) > 0 {
			add(qt, rs)
		}
	}
	return all, byTopic
}

// currentBreakdown returns the tally's breakdown, computed again only when records were added or
// the offsets moved (records left) since the last time. t.mu must be held.
func (q *queueTally) currentBreakdown(po []kafka.PartitionOffsets) kafka.Breakdown {
	if q.dirty || q.computed == nil || !slices.Equal(q.computed, po) {
		q.breakdown = q.tally.Breakdown(0)
		q.computed = append(make([]kafka.PartitionOffsets, 0, len(po)), po...)
		q.dirty = false
	}
	return q.breakdown
}

// join returns the group of connKey and the tally of who in it, made afresh when who moved to
// another connection or topic. t.mu must be held.
func (t *deadLetterTallies) join(connKey string, who types.NamespacedName, topic string) (*tallyGroup, *queueTally) {
	if old, ok := t.member[who]; ok && old != connKey {
		t.leave(who)
	}
	g, ok := t.groups[connKey]
	if !ok {
		g = &tallyGroup{queues: map[types.NamespacedName]*queueTally{}}
		t.groups[connKey] = g
	}
	q, ok := g.queues[who]
	if !ok || q.topic != topic {
		q = &queueTally{topic: topic, tally: kafka.NewTally()}
		g.queues[who] = q
	}
	t.member[who] = connKey
	return g, q
}

// Forget drops the tally of who.
func (t *deadLetterTallies) Forget(who types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leave(who)
}

// leave removes who from its group. t.mu must be held. A scan under way keeps feeding the dropped
// tally, which nobody reads any more.
func (t *deadLetterTallies) leave(who types.NamespacedName) {
	key, ok := t.member[who]
	if !ok {
		return
	}
	delete(t.member, who)
	g := t.groups[key]
	delete(g.queues, who)
	if len(g.queues) == 0 && g.inflight == nil {
		delete(t.groups, key)
	}
}
