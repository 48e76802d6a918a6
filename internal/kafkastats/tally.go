package kafkastats

import (
	"sort"
	"sync"
	"time"

	"github.com/retryops/retry-operator/internal/kafka"
)

// The headers of a dead letter record that a Tally counts by. They are the dispatcher's context
// headers (internal/dispatcher/headers); kept here as plain strings so this package stays independent
// of the data plane.
const (
	HeaderReason    = "retryops.reason"
	HeaderErrorType = "retryops.error.type"
	HeaderPipeline  = "retryops.pipeline"
)

// Tally is an incremental breakdown of one dead letter topic's records by reason, error type and
// source pipeline. Each refresh reads only the records added since the last one (Plan says which),
// and records that left the topic (trimmed by count-based retention or expired by age) leave the
// counts when the partition's start offset passes them (Forget). It keeps a compact entry per record
// held (24 bytes), so memory follows the topic's retained size. Not safe for concurrent use.
type Tally struct {
	parts map[int32]*partitionTally
	names []string
	index map[string]uint32
}

type talliedRecord struct {
	offset                    int64
	unixMilli                 int64
	reason, errType, pipeline uint32
}

type partitionTally struct {
	next int64
	recs []talliedRecord // ascending offsets
}

// NewTally returns an empty tally.
func NewTally() *Tally {
	return &Tally{parts: map[int32]*partitionTally{}, index: map[string]uint32{}}
}

func (t *Tally) intern(s string) uint32 {
	if i, ok := t.index[s]; ok {
		return i
	}
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
		i := sort.Search(len(p.recs), func(i int) bool { return p.recs[i].offset >= o.Start })
		if i > 0 {
			p.recs = append(p.recs[:0], p.recs[i:]...)
		}
		if p.next < o.Start || p.next > o.End { // trimmed past us, or the topic was recreated
			if p.next > o.End {
				p.recs = p.recs[:0]
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
// a record already tallied is ignored.
func (t *Tally) Add(r kafka.Record) {
	p := t.parts[r.Partition]
	if p == nil {
		p = &partitionTally{}
		t.parts[r.Partition] = p
	}
	if r.Offset < p.next {
		return
	}
	tr := talliedRecord{offset: r.Offset, unixMilli: r.Timestamp.UnixMilli()}
	reason, errType, pipeline := "unknown", "unknown", "unknown"
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderReason:
			reason = string(h.Value)
		case HeaderErrorType:
			errType = string(h.Value)
		case HeaderPipeline:
			pipeline = string(h.Value)
		}
	}
	tr.reason, tr.errType, tr.pipeline = t.intern(reason), t.intern(errType), t.intern(pipeline)
	p.recs = append(p.recs, tr)
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
	reasons, types, pipelines := map[uint32]int64{}, map[uint32]int64{}, map[uint32]int64{}
	var oldest, newest int64
	for _, p := range t.parts {
		for _, r := range p.recs {
			b.Messages++
			reasons[r.reason]++
			types[r.errType]++
			pipelines[r.pipeline]++
			if oldest == 0 || r.unixMilli < oldest {
				oldest = r.unixMilli
			}
			if r.unixMilli > newest {
				newest = r.unixMilli
			}
		}
	}
	if b.Messages > 0 {
		b.Oldest, b.Newest = time.UnixMilli(oldest).UTC(), time.UnixMilli(newest).UTC()
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
// the pipelines. It is safe for concurrent use.
type Counts struct {
	mu sync.Mutex
	m  map[string]map[string]int64
}

// Set replaces member's counts.
func (c *Counts) Set(member string, counts []Count) {
	m := make(map[string]int64, len(counts))
	for _, n := range counts {
		m[n.Name] = n.Count
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[string]int64{}
	}
	c.m[member] = m
}

// Get returns member's count under name (0 when it has none), and whether member published its
// counts.
func (c *Counts) Get(member, name string) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[member]
	return m[name], ok
}

// Forget drops member's counts.
func (c *Counts) Forget(member string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, member)
}
