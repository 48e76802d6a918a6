package kafkastats

import (
	"slices"
	"sync"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Bounds of Replayed: the offset ranges kept per partition, the tiers kept, and the ranges kept in
// all (16 bytes each: 1 MiB).
const (
	maxReplayedRanges      = 256
	maxReplayedTopics      = 4096
	maxReplayedRangesTotal = 1 << 16
)

// Replayed remembers where the dead-letter replays of this manager wrote into retry tiers: per
// connection, tier and partition, the ranges of offsets written. A replayed record is due when
// written, where DueOffsets, which knows a tier record only by its timestamp, takes it for a retry
// due a tier's delay later; the due lag adds the replayed records it did not count (ReplayedDue).
// It costs no Kafka request: the produce results say where each record went.
//
// It is memory only: after a restart the records replayed before are counted by their timestamps
// again. The ranges of a partition the group has read are dropped as the figures are read; past
// maxReplayedRanges on a partition the two closest ranges merge (the records between them then count
// as due: the figure errs towards waking and scaling up, never towards a record left waiting), and
// past maxReplayedTopics tiers or maxReplayedRangesTotal ranges the tier written longest ago is
// forgotten; a tier over maxReplayedRangesTotal alone merges ranges down to an equal share for each
// of its partitions.
type Replayed struct {
	mu     sync.Mutex
	seq    uint64
	ranges int // in all topics
	topics map[replayedKey]*replayedTopic
}

type replayedKey struct{ conn, topic string }

type replayedTopic struct {
	seq    uint64 // when last written, in Note calls
	ranges int    // in all its partitions
	parts  map[int32][]offsetRange
}

// set replaces partition p's ranges of t by rs, keeping the counts.
func (r *Replayed) set(t *replayedTopic, p int32, rs []offsetRange) {
	d := len(rs) - len(t.parts[p])
	t.ranges += d
	r.ranges += d
	if len(rs) == 0 {
		delete(t.parts, p)
		return
	}
	t.parts[p] = rs
}

// offsetRange is the offsets [first, end), sorted and disjoint in a partition's list.
type offsetRange struct{ first, end int64 }

// Note records the records written to topic over the connection connKey: results of a produce,
// only those acknowledged (Err nil) count.
func (r *Replayed) Note(connKey, topic string, results []kafka.ProduceResult) {
	byPart := map[int32][]int64{}
	for _, res := range results {
		if res.Err == nil && res.Offset >= 0 {
			byPart[res.Partition] = append(byPart[res.Partition], res.Offset)
		}
	}
	if len(byPart) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics == nil {
		r.topics = map[replayedKey]*replayedTopic{}
	}
	k := replayedKey{connKey, topic}
	t := r.topics[k]
	if t == nil {
		if len(r.topics) >= maxReplayedTopics {
			r.evictOldest()
		}
		t = &replayedTopic{parts: map[int32][]offsetRange{}}
		r.topics[k] = t
	}
	r.seq++
	t.seq = r.seq
	for p, offs := range byPart {
		slices.Sort(offs)
		rs := t.parts[p]
		for i := 0; i < len(offs); {
			j := i + 1
			for j < len(offs) && offs[j] <= offs[j-1]+1 {
				j++
			}
			rs = addRange(rs, offsetRange{offs[i], offs[j-1] + 1})
			i = j
		}
		for len(rs) > maxReplayedRanges {
			rs = mergeClosest(rs)
		}
		r.set(t, p, rs)
	}
	for r.ranges > maxReplayedRangesTotal && len(r.topics) > 1 {
		r.evictOldest()
	}
	if r.ranges > maxReplayedRangesTotal {
		// t alone is over the bound (it has many partitions): each keeps its share.
		share := max(1, maxReplayedRangesTotal/len(t.parts))
		for p, rs := range t.parts {
			for len(rs) > share {
				rs = mergeClosest(rs)
			}
			r.set(t, p, rs)
		}
	}
}

func (r *Replayed) evictOldest() {
	var oldest replayedKey
	var seq uint64
	first := true
	for k, t := range r.topics {
		if first || t.seq < seq {
			oldest, seq, first = k, t.seq, false
		}
	}
	r.ranges -= r.topics[oldest].ranges
	delete(r.topics, oldest)
}

// addRange inserts n into the sorted, disjoint rs, merging what it overlaps or touches.
func addRange(rs []offsetRange, n offsetRange) []offsetRange {
	i, _ := slices.BinarySearchFunc(rs, n.first, func(r offsetRange, first int64) int {
		switch {
		case r.end < first:
			return -1
		case r.first > first:
			return 1
		}
		return 0
	})
	// rs[i] is the first range that ends at or after n.first.
	j := i
	for j < len(rs) && rs[j].first <= n.end {
		n.first, n.end = min(n.first, rs[j].first), max(n.end, rs[j].end)
		j++
	}
	return slices.Replace(rs, i, j, n)
}

// mergeClosest merges the two neighbouring ranges of rs with the smallest gap.
func mergeClosest(rs []offsetRange) []offsetRange {
	best := 1
	for i := 2; i < len(rs); i++ {
		if rs[i].first-rs[i-1].end < rs[best].first-rs[best-1].end {
			best = i
		}
	}
	rs[best-1].end = rs[best].end
	return slices.Delete(rs, best, best+1)
}

// ReplayedDue is the number of replayed records (Note) of a retry tier that the consumer group has
// to read and that DueLag, given the same offsets, commits and dueEnd, did not count: on each
// partition, those from where the due records end (or where the group's lag starts, if later) to
// the partition's end offset. It drops the ranges the group has read or retention removed. A
// partition dueEnd does not know counts from the group's commit.
func (r *Replayed) ReplayedDue(connKey, topic string, offsets []kafka.PartitionOffsets, committed map[int32]int64, dueEnd map[int32]kafka.TimedOffset) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.topics[replayedKey{connKey, topic}]
	if t == nil {
		return 0
	}
	var n int64
	for _, o := range offsets {
		rs := t.parts[o.Partition]
		if len(rs) == 0 {
			continue
		}
		from := o.Start
		if c, ok := committed[o.Partition]; ok && c > from {
			from = c
		}
		// Read or gone: never counted again.
		k := 0
		for k < len(rs) && rs[k].end <= from {
			k++
		}
		rs = rs[k:]
		r.set(t, o.Partition, rs)
		if len(rs) == 0 {
			continue
		}
		counted := from
		if at, ok := dueEnd[o.Partition]; ok {
			end := at.Offset
			if end < 0 || end > o.End {
				end = o.End
			}
			counted = max(counted, end)
		}
		for _, x := range rs {
			lo, hi := max(x.first, counted), min(x.end, o.End)
			if hi > lo {
				n += hi - lo
			}
		}
	}
	if len(t.parts) == 0 {
		delete(r.topics, replayedKey{connKey, topic})
	}
	return n
}
