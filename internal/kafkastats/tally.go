package kafkastats

import (
	"math"
	"sort"
	"sync"
	"time"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/lease"
)

// The headers of a dead letter record that a Tally counts by. They are the dispatcher's context
// headers (sdk/headers); kept here as plain strings so this package stays independent
// of the data plane.
const (
	HeaderReason    = "retryops.reason"
	HeaderErrorType = "retryops.error.type"
	HeaderPipeline  = "retryops.pipeline"
)

// Tally is an incremental breakdown of one dead letter topic's records by reason, error type and
// source pipeline. Each refresh reads only the records added since the last one (Plan says which),
// and records that left the topic (trimmed by count-based retention or expired by age) leave the
// counts when the partition's start offset passes them (Plan). It keeps a compact entry per record
// held (12 bytes: its offset and timestamp relative to the first record of its chunk, and its set of
// labels), in chunks of at most chunkLen entries, so memory follows the topic's retained size
// without ever copying it whole; the names themselves are kept once. Adding a record allocates
// nothing unless it brings a name or a combination of names not seen before, or starts a chunk. Not
// safe for concurrent use.
type Tally struct {
	parts map[int32]*partitionTally
	names []string
	index map[string]uint32
	// sets are the combinations of names seen, by index; setIndex finds them.
	sets     []labelSet
	setIndex map[labelSet]uint32
}

// labelSet is the reason, error type and pipeline of a record, as indexes into Tally.names.
type labelSet struct {
	reason, errType, pipeline uint32
}

// entry is one record tallied.
type entry struct {
	offset uint32 // minus the chunk's offset
	milli  int32  // its timestamp in Unix milliseconds, minus the chunk's
	set    uint32 // index into Tally.sets
}

// chunk is a run of records of one partition, ascending offsets.
type chunk struct {
	offset, milli int64 // of the first record written to it
	entries       []entry
}

// chunkLen is the number of entries of a full chunk (48 KiB).
const chunkLen = 4096

func (c *chunk) lastOffset() int64 { return c.offset + int64(c.entries[len(c.entries)-1].offset) }

type partitionTally struct {
	next   int64
	chunks []*chunk // ascending offsets, none empty
}

// forget drops the records below offset start.
func (p *partitionTally) forget(start int64) {
	drop := 0
	for drop < len(p.chunks) && p.chunks[drop].lastOffset() < start {
		drop++
	}
	if drop > 0 {
		clear(p.chunks[:drop])
		p.chunks = p.chunks[drop:]
	}
	if len(p.chunks) == 0 {
		p.chunks = nil
		return
	}
	c := p.chunks[0]
	if i := sort.Search(len(c.entries), func(i int) bool { return c.offset+int64(c.entries[i].offset) >= start }); i > 0 {
		c.entries = c.entries[i:]
	}
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{parts: map[int32]*partitionTally{}, index: map[string]uint32{}, setIndex: map[labelSet]uint32{}}
}

// intern returns the index of name b (a header's value; "unknown" when nil), allocating only for a
// name not seen before.
func (t *Tally) intern(b []byte, unknown bool) uint32 {
	if unknown {
		b = []byte("unknown")
	}
	if i, ok := t.index[string(b)]; ok {
		return i
	}
	s := string(b)
	t.names = append(t.names, s)
	t.index[s] = uint32(len(t.names) - 1)
	return t.index[s]
}

// Plan forgets the records below each partition's start offset and returns the ranges still to
// read: from the first offset not yet tallied to the end offset.
func (t *Tally) Plan(offsets []kafka.PartitionOffsets) map[int32]kafka.OffsetRange {
	ranges := map[int32]kafka.OffsetRange{}
	seen := map[int32]bool{}
	for _, o := range offsets {
		seen[o.Partition] = true
		p := t.parts[o.Partition]
		if p == nil {
			p = &partitionTally{next: o.Start}
			t.parts[o.Partition] = p
		}
		// Records before the start offset were trimmed or expired.
		p.forget(o.Start)
		if p.next < o.Start || p.next > o.End { // trimmed past us, or the topic was recreated
			if p.next > o.End {
				p.chunks = nil
			}
			p.next = o.Start
		}
		if p.next < o.End {
			ranges[o.Partition] = kafka.OffsetRange{From: p.next, To: o.End}
		}
	}
	for part := range t.parts {
		if !seen[part] {
			delete(t.parts, part)
		}
	}
	return ranges
}

// Add tallies one record read from the topic. Records must arrive in offset order per partition;
// a record already tallied is ignored. Add keeps nothing of r (its headers may be reused).
func (t *Tally) Add(r kafka.Record) {
	p := t.parts[r.Partition]
	if p == nil {
		p = &partitionTally{}
		t.parts[r.Partition] = p
	}
	if r.Offset < p.next {
		return
	}
	var reason, errType, pipeline []byte
	var hasReason, hasErrType, hasPipeline bool
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderReason:
			reason, hasReason = h.Value, true
		case HeaderErrorType:
			errType, hasErrType = h.Value, true
		case HeaderPipeline:
			pipeline, hasPipeline = h.Value, true
		}
	}
	ls := labelSet{t.intern(reason, !hasReason), t.intern(errType, !hasErrType), t.intern(pipeline, !hasPipeline)}
	set, ok := t.setIndex[ls]
	if !ok {
		t.sets = append(t.sets, ls)
		set = uint32(len(t.sets) - 1)
		t.setIndex[ls] = set
	}
	milli := r.Timestamp.UnixMilli()
	var c *chunk
	if n := len(p.chunks); n > 0 {
		c = p.chunks[n-1]
	}
	if c == nil || len(c.entries) >= chunkLen || r.Offset-c.offset > math.MaxUint32 ||
		milli-c.milli > math.MaxInt32 || milli-c.milli < math.MinInt32 {
		c = &chunk{offset: r.Offset, milli: milli}
		p.chunks = append(p.chunks, c)
	}
	c.entries = append(c.entries, entry{offset: uint32(r.Offset - c.offset), milli: int32(milli - c.milli), set: set})
	p.next = r.Offset + 1
}

// Count is a number of records under one name.
type Count struct {
	Name  string
	Count int64
}

// Breakdown is what a Tally knows of the records held.
type Breakdown struct {
	// Messages is the number of records tallied.
	Messages int64
	// Oldest and Newest are the earliest and latest record timestamps (zero when empty).
	Oldest, Newest time.Time
	// Reasons, ErrorTypes and Pipelines count the records by header, the largest first, ties by name.
	Reasons, ErrorTypes, Pipelines []Count
}

// Breakdown returns the counts, each list cut to its limit largest entries (0: no limit).
func (t *Tally) Breakdown(limit int) Breakdown {
	var b Breakdown
	perSet := make([]int64, len(t.sets))
	var oldest, newest int64
	for _, p := range t.parts {
		for _, c := range p.chunks {
			b.Messages += int64(len(c.entries))
			for _, e := range c.entries {
				perSet[e.set]++
				m := c.milli + int64(e.milli)
				if oldest == 0 || m < oldest {
					oldest = m
				}
				if m > newest {
					newest = m
				}
			}
		}
	}
	if b.Messages > 0 {
		b.Oldest, b.Newest = time.UnixMilli(oldest).UTC(), time.UnixMilli(newest).UTC()
	}
	reasons, types, pipelines := map[uint32]int64{}, map[uint32]int64{}, map[uint32]int64{}
	for i, n := range perSet {
		if n == 0 {
			continue
		}
		ls := t.sets[i]
		reasons[ls.reason] += n
		types[ls.errType] += n
		pipelines[ls.pipeline] += n
	}
	b.Reasons, b.ErrorTypes, b.Pipelines = t.counts(reasons, limit), t.counts(types, limit), t.counts(pipelines, limit)
	return b
}

func (t *Tally) counts(m map[uint32]int64, limit int) []Count {
	out := make([]Count, 0, len(m))
	for i, n := range m {
		out = append(out, Count{Name: t.names[i], Count: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Name < out[j].Name
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Counts keeps, per member, the complete counts by name that the member last published: a dead
// letter queue's count of its dead letters by pipeline (its status lists the largest only), read by
// the pipelines. A member that stops publishing (its queue was deleted) has its counts go after
// lease.For(its interval). It is safe for concurrent use.
type Counts struct {
	mu     sync.Mutex
	m      map[string]map[string]int64
	leases lease.Table[string]
}

// Set replaces member's counts, at now; member publishes again within interval.
func (c *Counts) Set(member string, counts []Count, now time.Time, interval time.Duration) {
	m := make(map[string]int64, len(counts))
	for _, n := range counts {
		m[n.Name] = n.Count
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[string]int64{}
	}
	for _, gone := range c.leases.Expired(now) {
		delete(c.m, gone)
	}
	c.m[member] = m
	c.leases.Renew(member, now, lease.For(interval))
}

// Renew keeps member's counts, if any, for lease.For(interval) from now (member is alive but
// published nothing this time).
func (c *Counts) Renew(member string, now time.Time, interval time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[member]; ok && c.leases.Holds(member, now) { // expired counts stay expired
		c.leases.Renew(member, now, lease.For(interval))
	}
}

// Get returns member's count under name (0 when it has none), and whether member published its
// counts and their lease holds at now.
func (c *Counts) Get(member, name string, now time.Time) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[member]
	if !ok || !c.leases.Holds(member, now) {
		return 0, false
	}
	return m[name], true
}

// Len is the number of members whose counts are kept.
func (c *Counts) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}
