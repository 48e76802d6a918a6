package dispatcher

import "container/heap"

// partitionTracker follows the records of one partition from fetch to commit: which are queued,
// which are in flight, which finished, and up to which offset the partition may be committed. It
// is plain data (no client, no lock, no goroutine): the engine calls it with its lock held.
//
// Records are kept in offset order. The committable offset is the offset after the last record of
// the finished prefix, or, when an unfinished record follows, that record's own offset (offsets
// may have gaps: compacted records, transaction markers). A record finished out of order waits
// until every record before it finished; a record abandoned in a live partition is never finished,
// so nothing past it is committed and it is delivered again after a restart or a rebalance.
//
// A source partition starts its records in offset order. A retry-tier partition (byDue) reads
// ahead and starts its records in the order they fall due (earliest first, then by offset), each
// at its own due time, so that jitter survives the tier; commits still advance only over the
// finished prefix.
type partitionTracker struct {
	items []*item // fetched records in offset order; items[:head] are popped (nil)
	head  int     // first unfinished record
	next  int     // first record not yet started (source partitions: records start in order)
	byDue bool    // records start by due time (retry tiers), from ready
	ready dueHeap // queued records by due time (byDue only)

	nQueued  int   // fetched, not yet started
	inFlight int   // started, not finished
	held     int   // started and not yet committed (or abandoned): the engine's slots of this partition
	popped   int   // finished records popped from items, waiting for their commit
	bytes    int64 // size of the records in items[head:] (the look-ahead window of a retry tier)

	commitOffset int64 // next offset to commit; -1 until something finished
	commitEpoch  int32 // leader epoch of the record before commitOffset
	committed    int64 // last committed offset; -1 for none
	gone         bool  // revoked: nothing is tracked any more
	startedTo    int64 // one past the highest offset started (here or, before a revocation, earlier)
}

// compactAfter is how many popped slots the tracker lets build up before it moves the live records
// to the front of items (when they are at most as many as the popped ones).
const compactAfter = 1024

func newPartitionTracker(byDue bool) partitionTracker {
	return partitionTracker{commitOffset: -1, committed: -1, byDue: byDue}
}

// add queues a fetched record (in offset order).
func (t *partitionTracker) add(it *item) {
	t.items = append(t.items, it)
	t.nQueued++
	t.bytes += it.size
	if t.byDue {
		heap.Push(&t.ready, it)
	}
}

// queued is the number of records not yet started.
func (t *partitionTracker) queued() int { return t.nQueued }

// window is the number and size of the records held from the first unfinished one on.
func (t *partitionTracker) window() (records int, bytes int64) { return len(t.items) - t.head, t.bytes }

// peek returns the next record to start, or nil when none is queued: the next in offset order, or
// for a retry tier the one due first.
func (t *partitionTracker) peek() *item {
	if t.byDue {
		if len(t.ready) > 0 {
			return t.ready[0]
		}
		return nil
	}
	if t.next < len(t.items) {
		return t.items[t.next]
	}
	return nil
}

// start marks the record peek returned as in flight.
func (t *partitionTracker) start() {
	if t.byDue {
		heap.Pop(&t.ready)
	} else {
		t.next++
	}
	t.started()
}

func (t *partitionTracker) started() {
	t.nQueued--
	t.inFlight++
	t.held++
}

// first returns the first unfinished record of a retry tier when it is queued (not started), else
// nil: the record that holds the tier's look-ahead window and its commits.
func (t *partitionTracker) first() *item {
	if !t.byDue || t.head >= len(t.items) {
		return nil
	}
	it := t.items[t.head]
	if i := it.heapIdx; i < 0 || i >= len(t.ready) || t.ready[i] != it {
		return nil
	}
	return it
}

// startFirst marks the record first returned as in flight, out of its due order.
func (t *partitionTracker) startFirst(it *item) {
	heap.Remove(&t.ready, it.heapIdx)
	t.started()
}

// noteStart records that the record at offset started, for redelivery counting.
func (t *partitionTracker) noteStart(offset int64) { t.startedTo = max(t.startedTo, offset+1) }

// releaseStale releases the slots of finished records popped below the last committed offset: the
// fetch position went back under it (a reset after log truncation, a seek), so these records have
// nothing to commit and would otherwise hold their slots until a later record is committed. It
// returns the slots released.
func (t *partitionTracker) releaseStale() int {
	if t.gone || t.popped == 0 || t.commitOffset > t.committed {
		return 0
	}
	n := t.popped
	t.popped = 0
	t.held -= n
	return n
}

// finish gives a started record its fate, one that finishes it (fate.finished), and moves the commit point over the finished prefix. It
// reports whether the partition now has an offset to commit past the last committed one, and live,
// false when the partition was revoked (it released the record's slot and in-flight count then).
func (t *partitionTracker) finish(it *item, f fate) (advanced, live bool) {
	it.fate = f
	t.inFlight--
	if t.gone {
		return false, false
	}
	return t.advance(), true
}

// abandon gives up a started record without finishing it: its offset is never committed. It
// reports live, false when the partition was revoked (it released the record's slot and in-flight
// count then); otherwise the record's slot is released.
func (t *partitionTracker) abandon(it *item) (live bool) {
	it.fate = fateAbandoned
	t.inFlight--
	if t.gone {
		return false
	}
	t.held--
	return true
}

// advance pops the finished prefix, moves the commit point and compacts items.
func (t *partitionTracker) advance() bool {
	moved := false
	for t.head < len(t.items) && t.items[t.head].fate.finished() {
		r := t.items[t.head].rec
		t.commitOffset, t.commitEpoch = r.Offset+1, r.LeaderEpoch
		t.bytes -= t.items[t.head].size
		t.items[t.head] = nil
		t.head++
		t.popped++
		moved = true
	}
	if !moved {
		return false
	}
	if t.head < len(t.items) {
		// The first unfinished record may sit past a gap (compaction, transaction markers).
		t.commitOffset = t.items[t.head].rec.Offset
	}
	switch {
	case t.head == len(t.items):
		t.items, t.head, t.next = t.items[:0], 0, 0
	case t.head >= compactAfter && t.head*2 >= len(t.items):
		k := copy(t.items, t.items[t.head:])
		clear(t.items[k:])
		t.items = t.items[:k]
		if !t.byDue {
			t.next -= t.head
		}
		t.head = 0
	}
	return t.commitOffset > t.committed
}

// committable returns the offset to commit and its leader epoch, and release, the slots a
// successful commit of it frees (the records popped so far); ok is false when there is nothing
// new to commit, or the partition was revoked.
func (t *partitionTracker) committable() (offset int64, epoch int32, release int, ok bool) {
	if t.gone || t.commitOffset < 0 || t.commitOffset <= t.committed {
		return 0, 0, 0, false
	}
	return t.commitOffset, t.commitEpoch, t.popped, true
}

// committedTo records a successful commit of offset that committable returned with release. It
// returns the slots freed (none once the partition was revoked).
func (t *partitionTracker) committedTo(offset int64, release int) int {
	t.committed = max(t.committed, offset)
	if t.gone {
		return 0
	}
	release = min(release, t.popped) // releaseStale may have released some since the commit was collected
	t.popped -= release
	t.held -= release
	return release
}

// position is the offset consumption stands at: the first unfinished record's, else the commit
// point; -1 when nothing is known yet.
func (t *partitionTracker) position() int64 {
	if t.head < len(t.items) {
		return t.items[t.head].rec.Offset
	}
	return t.commitOffset
}

// revoke forgets the partition: the queued records are dropped and every slot is released (the
// records in flight are abandoned; finishing them later changes nothing). It returns the slots
// released, how many of them were in flight, and the number of queued records dropped.
func (t *partitionTracker) revoke() (released, inFlight, dropped int) {
	released, inFlight, dropped = t.held, t.inFlight, t.nQueued
	t.gone = true
	t.held, t.popped, t.nQueued, t.bytes = 0, 0, 0, 0
	clear(t.items)
	t.items, t.head, t.next = nil, 0, 0
	clear(t.ready)
	t.ready = nil
	return released, inFlight, dropped
}

// dueHeap orders queued retry-tier records by due time, then offset. A record to dead-letter
// without delivery (pre set) or with no due time is due at once.
type dueHeap []*item

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	a, b := h[i].dueKey(), h[j].dueKey()
	if !a.Equal(b) {
		return a.Before(b)
	}
	return h[i].rec.Offset < h[j].rec.Offset
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *dueHeap) Push(x any) {
	it := x.(*item)
	it.heapIdx = len(*h)
	*h = append(*h, it)
}
func (h *dueHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.heapIdx = -1
	return it
}
