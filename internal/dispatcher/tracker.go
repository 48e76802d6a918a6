package dispatcher

// partitionTracker follows the records of one partition from fetch to commit: which are queued,
// which are in flight, which finished, and up to which offset the partition may be committed. It
// is plain data (no client, no lock, no goroutine): the engine calls it with its lock held.
//
// Records are kept in offset order. The committable offset is the offset after the last record of
// the finished prefix, or, when an unfinished record follows, that record's own offset (offsets
// may have gaps: compacted records, transaction markers). A record finished out of order waits
// until every record before it finished; a record abandoned in a live partition is never finished,
// so nothing past it is committed and it is delivered again after a restart or a rebalance.
type partitionTracker struct {
	items []*item // fetched records in offset order; items[:head] are popped (nil)
	head  int     // first unfinished record
	next  int     // first record not yet started

	inFlight int // started, not finished
	held     int // started and not yet committed (or abandoned): the engine's slots of this partition
	popped   int // finished records popped from items, waiting for their commit

	commitOffset int64 // next offset to commit; -1 until something finished
	commitEpoch  int32 // leader epoch of the record before commitOffset
	committed    int64 // last committed offset; -1 for none
	gone         bool  // revoked: nothing is tracked any more
}

// compactAfter is how many popped slots the tracker lets build up before it moves the live records
// to the front of items (when they are at most as many as the popped ones).
const compactAfter = 1024

func newPartitionTracker() partitionTracker {
	return partitionTracker{commitOffset: -1, committed: -1}
}

// add queues a fetched record (in offset order).
func (t *partitionTracker) add(it *item) { t.items = append(t.items, it) }

// queued is the number of records not yet started.
func (t *partitionTracker) queued() int { return len(t.items) - t.next }

// peek returns the next record to start, or nil when none is queued.
func (t *partitionTracker) peek() *item {
	if t.next < len(t.items) {
		return t.items[t.next]
	}
	return nil
}

// start marks the record peek returned as in flight.
func (t *partitionTracker) start() {
	t.next++
	t.inFlight++
	t.held++
}

// finish marks a started record finished and moves the commit point over the finished prefix. It
// reports whether the partition now has an offset to commit past the last committed one.
func (t *partitionTracker) finish(it *item) bool {
	it.done = true
	t.inFlight--
	if t.gone {
		return false // a revoked partition released its slots already
	}
	return t.advance()
}

// abandon gives up a started record without finishing it: its offset is never committed. It
// returns the slots released (1, or 0 when the partition was revoked and released them already).
func (t *partitionTracker) abandon(it *item) int {
	it.abandoned = true
	t.inFlight--
	if t.gone {
		return 0
	}
	t.held--
	return 1
}

// advance pops the finished prefix, moves the commit point and compacts items.
func (t *partitionTracker) advance() bool {
	moved := false
	for t.head < t.next && t.items[t.head].done {
		r := t.items[t.head].rec
		t.commitOffset, t.commitEpoch = r.Offset+1, r.LeaderEpoch
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
		t.next -= t.head
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
// released and the number of queued records dropped.
func (t *partitionTracker) revoke() (released, dropped int) {
	released, dropped = t.held, t.queued()
	t.gone = true
	t.held, t.popped = 0, 0
	clear(t.items)
	t.items, t.head, t.next = nil, 0, 0
	return released, dropped
}
