package kafkastats

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/lease"
)

// Tallies keeps one Tally per dead letter queue (a member, named by the caller): the breakdown of
// the records its topic holds by reason, error type and pipeline, with their times. A refresh reads only the records
// added since the last one, and records that left the topic (trimmed by retention.maxMessages,
// expired by retention.maxAge) leave the counts as the start offset passes them. The reading is
// batched: the first queue of a connection that finds records to read scans, with one consumer
// client, the new records of every queue of the connection whose offsets the offsets snapshot holds;
// the queues that refresh after it find nothing left to read.
//
// A tally lives as long as its queue uses the same connection and topic and keeps asking for it (a
// lease of a few refresh intervals, renewed by every Breakdown: the tally of a queue deleted goes by
// itself); a topic deleted and recreated is noticed by its offsets (Tally.Plan) and counted afresh.
type Tallies struct {
	offsets     *Offsets
	scanner     kafka.Scanner
	scanTimeout time.Duration

	mu     sync.Mutex
	groups map[string]*tallyGroup // by kafka.Connection.Key
	member map[string]string      // member -> connection key
	leases lease.Table[string]    // of the members

	// scans and scanned count the scans made and the records they read (Scans).
	scans, scanned atomic.Int64
}

// defaultScanTimeout bounds one scan, and so how long the queues of a connection wait for their
// breakdown when the scan cannot finish (a partition that went away under it). A scan cut short
// keeps what it read; the next refresh goes on from there, so even a first read of a large queue
// completes over a few refreshes.
const defaultScanTimeout = 10 * time.Second

// tallyGroup is the tallies of one connection.
type tallyGroup struct {
	queues   map[string]*queueTally
	inflight chan struct{} // closed when the scan under way ends
	// failedAt and failure are the snapshot time and error of the last scan if it failed: the queues
	// refreshing from the same snapshot get the error instead of scanning again.
	failedAt time.Time
	failure  error
}

// queueTally is one queue's tally.
type queueTally struct {
	topic string
	tally *Tally
	// plannedAt is the time of the offsets the tally was last brought up to.
	plannedAt time.Time

	// The breakdown last computed and the offsets it was computed for; dirty when records were added
	// since.
	breakdown Breakdown
	computed  []kafka.PartitionOffsets
	dirty     bool
}

// NewTallies returns empty tallies that plan their rounds with the snapshots of offsets and read
// records with scanner.
func NewTallies(offsets *Offsets, scanner kafka.Scanner) *Tallies {
	return &Tallies{
		offsets: offsets, scanner: scanner, scanTimeout: defaultScanTimeout,
		groups: map[string]*tallyGroup{}, member: map[string]string{},
	}
}

// Scans returns the number of scans made so far and of the records they read.
func (t *Tallies) Scans() (scans, records int64) { return t.scans.Load(), t.scanned.Load() }

// Breakdown brings the tally of the queue who (topic on connection conn, whose key is connKey) up to
// the offsets po, read at time at, and returns its breakdown (every name, unbounded); who asks again
// within interval (its refresh interval), or its tally goes after lease.For(interval). When
// records had to be read and the scan failed, the breakdown is what could be read, and the error is
// returned with it.
func (t *Tallies) Breakdown(ctx context.Context, conn kafka.Connection, connKey, who, topic string, po []kafka.PartitionOffsets, at time.Time, interval time.Duration) (Breakdown, error) {
	for {
		t.mu.Lock()
		g, q := t.join(connKey, who, topic, at, lease.For(interval))
		if ch := g.inflight; ch != nil {
			t.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return Breakdown{}, ctx.Err()
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
		err := t.scanner.Scan(scanCtx, conn, all, func(r kafka.Record) {
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
func (t *Tallies) planRound(connKey string, g *tallyGroup, who string, q *queueTally, ranges map[int32]kafka.OffsetRange) (map[string]map[int32]kafka.OffsetRange, map[string][]*queueTally) {
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
func (q *queueTally) currentBreakdown(po []kafka.PartitionOffsets) Breakdown {
	if q.dirty || q.computed == nil || !slices.Equal(q.computed, po) {
		q.breakdown = q.tally.Breakdown(0)
		q.computed = append(make([]kafka.PartitionOffsets, 0, len(po)), po...)
		q.dirty = false
	}
	return q.breakdown
}

// join returns the group of connKey and the tally of who in it, made afresh when who moved to
// another connection or topic, held for d from now; the tallies whose lease expired go. t.mu must
// be held.
func (t *Tallies) join(connKey string, who string, topic string, now time.Time, d time.Duration) (*tallyGroup, *queueTally) {
	for _, m := range t.leases.Expired(now) {
		if m != who {
			t.leave(m)
		}
	}
	t.leases.Renew(who, now, d)
	if old, ok := t.member[who]; ok && old != connKey {
		t.leave(who)
	}
	g, ok := t.groups[connKey]
	if !ok {
		g = &tallyGroup{queues: map[string]*queueTally{}}
		t.groups[connKey] = g
	}
	q, ok := g.queues[who]
	if !ok || q.topic != topic {
		q = &queueTally{topic: topic, tally: NewTally()}
		g.queues[who] = q
	}
	t.member[who] = connKey
	return g, q
}

// leave removes who from its group. t.mu must be held. A scan under way keeps feeding the dropped
// tally, which nobody reads any more.
func (t *Tallies) leave(who string) {
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

// Renew keeps the tally of who, if there is one, for lease.For(interval) from now: who is alive
// but could not read its offsets (Kafka unreachable), and must not find its tally gone once it can.
func (t *Tallies) Renew(who string, now time.Time, interval time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.member[who]; ok {
		t.leases.Renew(who, now, lease.For(interval))
	}
}

// Members is the number of queues tallied.
func (t *Tallies) Members() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.member)
}
