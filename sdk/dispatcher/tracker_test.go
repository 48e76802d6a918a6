package dispatcher

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// trackerOp is one step of a tracker scenario: an operation and the state it must leave.
type trackerOp struct {
	do string // start (n records), finish, abandon (offsets from..to-1), commit, revoke
	n  int    // start: how many
	// from, to: the offsets finish and abandon apply to, in this order; to 0 means from alone.
	from, to int64

	advanced bool  // finish: the last finish reported a new offset to commit
	released int   // abandon, commit, revoke: the slots released in all
	dropped  int   // revoke: the queued records dropped
	commit   int64 // the committable offset after the step; -1: nothing to commit
	held     int
	inFlight int
	queued   int
	items    int // len(items) after the step, when not 0 (compaction)
}

func TestPartitionTracker(t *testing.T) {
	seq := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(i)
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		offsets []int64 // fetched, in order
		ops     []trackerOp
	}{
		{
			name:    "records finished in order move the commit point past each",
			offsets: seq(3),
			ops: []trackerOp{
				{do: "start", n: 3, commit: -1, held: 3, inFlight: 3},
				{do: "finish", from: 0, advanced: true, commit: 1, held: 3, inFlight: 2},
				{do: "finish", from: 1, advanced: true, commit: 2, held: 3, inFlight: 1},
				{do: "finish", from: 2, advanced: true, commit: 3, held: 3},
				{do: "commit", released: 3, commit: -1},
			},
		},
		{
			name:    "a record finished out of order waits for the gap before it",
			offsets: seq(4),
			ops: []trackerOp{
				{do: "start", n: 4, commit: -1, held: 4, inFlight: 4},
				{do: "finish", from: 2, advanced: false, commit: -1, held: 4, inFlight: 3},
				{do: "finish", from: 1, advanced: false, commit: -1, held: 4, inFlight: 2},
				{do: "finish", from: 0, advanced: true, commit: 3, held: 4, inFlight: 1}, // 0..2 at once
				{do: "commit", released: 3, commit: -1, held: 1, inFlight: 1},
				{do: "finish", from: 3, advanced: true, commit: 4, held: 1},
			},
		},
		{
			name:    "offsets with gaps: the commit point is the next unfinished record's own offset",
			offsets: []int64{5, 7, 10},
			ops: []trackerOp{
				{do: "start", n: 3, commit: -1, held: 3, inFlight: 3},
				{do: "finish", from: 5, advanced: true, commit: 7, held: 3, inFlight: 2},
				{do: "finish", from: 10, advanced: false, commit: 7, held: 3, inFlight: 1},
				{do: "finish", from: 7, advanced: true, commit: 11, held: 3},
			},
		},
		{
			name:    "a commit releases only the records popped before it was collected",
			offsets: seq(4),
			ops: []trackerOp{
				{do: "start", n: 2, commit: -1, held: 2, inFlight: 2, queued: 2},
				{do: "finish", from: 0, advanced: true, commit: 1, held: 2, inFlight: 1, queued: 2},
				{do: "commit", released: 1, commit: -1, held: 1, inFlight: 1, queued: 2},
				{do: "finish", from: 1, advanced: true, commit: 2, held: 1, queued: 2},
				{do: "start", n: 2, commit: 2, held: 3, inFlight: 2},
				{do: "commit", released: 1, commit: -1, held: 2, inFlight: 2},
			},
		},
		{
			name:    "an abandoned record releases its slot and holds the commit point back",
			offsets: seq(3),
			ops: []trackerOp{
				{do: "start", n: 3, commit: -1, held: 3, inFlight: 3},
				{do: "abandon", from: 0, released: 1, commit: -1, held: 2, inFlight: 2},
				{do: "finish", from: 1, to: 3, advanced: false, commit: -1, held: 2},
			},
		},
		{
			name:    "revocation releases every slot, drops the queue and ignores what finishes later",
			offsets: seq(5),
			ops: []trackerOp{
				{do: "start", n: 3, commit: -1, held: 3, inFlight: 3, queued: 2},
				{do: "finish", from: 0, advanced: true, commit: 1, held: 3, inFlight: 2, queued: 2},
				{do: "revoke", released: 3, dropped: 2, commit: -1, inFlight: 2},
				{do: "finish", from: 1, advanced: false, commit: -1, inFlight: 1},
				{do: "abandon", from: 2, released: 0, commit: -1},
				{do: "commit", released: 0, commit: -1},
			},
		},
		{
			name:    "a long finished prefix is compacted away and the offsets stay right",
			offsets: seq(3000),
			ops: []trackerOp{
				{do: "start", n: 3000, commit: -1, held: 3000, inFlight: 3000},
				{do: "finish", from: 0, to: 1499, advanced: true, commit: 1499, held: 3000, inFlight: 1501, items: 3000},
				// Popping the 1500th record moves the 1500 unfinished ones to the front.
				{do: "finish", from: 1499, advanced: true, commit: 1500, held: 3000, inFlight: 1500, items: 1500},
				{do: "finish", from: 2999, advanced: false, commit: 1500, held: 3000, inFlight: 1499, items: 1500},
				{do: "commit", released: 1500, commit: -1, held: 1500, inFlight: 1499, items: 1500},
				{do: "finish", from: 1500, to: 2999, advanced: true, commit: 3000, held: 1500},
				{do: "commit", released: 1500, commit: -1},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newPartitionTracker(false)
			byOffset := map[int64]*item{}
			for _, o := range tc.offsets {
				it := &item{rec: &kgo.Record{Offset: o, LeaderEpoch: 7}}
				byOffset[o] = it
				tr.add(it)
			}
			for i, op := range tc.ops {
				released, dropped, advanced := 0, 0, false
				offsets := []int64{op.from}
				if op.to != 0 {
					offsets = offsets[:0]
					for o := op.from; o < op.to; o++ {
						offsets = append(offsets, o)
					}
				}
				switch op.do {
				case "start":
					for range op.n {
						if tr.peek() == nil {
							t.Fatalf("step %d: nothing to start", i)
						}
						tr.start()
					}
				case "finish":
					for _, o := range offsets {
						advanced, _ = tr.finish(byOffset[o], fateDelivered)
						if !byOffset[o].fate.finished() {
							t.Fatalf("step %d: offset %d not marked done", i, o)
						}
					}
				case "abandon":
					for _, o := range offsets {
						if tr.abandon(byOffset[o]) {
							released++
						}
					}
				case "commit":
					if off, epoch, release, ok := tr.committable(); ok {
						if epoch != 7 {
							t.Errorf("step %d: epoch %d, want the record's 7", i, epoch)
						}
						released = tr.committedTo(off, release)
					}
				case "revoke":
					released, _, dropped = tr.revoke()
				default:
					t.Fatalf("step %d: unknown op %q", i, op.do)
				}
				commit := int64(-1)
				if off, _, _, ok := tr.committable(); ok {
					commit = off
				}
				if advanced != op.advanced || released != op.released || dropped != op.dropped || commit != op.commit ||
					tr.held != op.held || tr.inFlight != op.inFlight || tr.queued() != op.queued {
					t.Fatalf("step %d (%s %d..%d): advanced %v released %d dropped %d commit %d held %d inFlight %d queued %d, "+
						"want %v %d %d %d %d %d %d", i, op.do, op.from, op.to, advanced, released, dropped, commit, tr.held, tr.inFlight, tr.queued(),
						op.advanced, op.released, op.dropped, op.commit, op.held, op.inFlight, op.queued)
				}
				if op.items != 0 && len(tr.items) != op.items {
					t.Fatalf("step %d: %d items kept, want %d", i, len(tr.items), op.items)
				}
			}
		})
	}
}

// TestPartitionTrackerPosition: the lag is measured from the first unfinished record, or from the
// commit point once every fetched record finished.
func TestPartitionTrackerPosition(t *testing.T) {
	tr := newPartitionTracker(false)
	if p := tr.position(); p != -1 {
		t.Fatalf("position of an empty tracker %d, want -1", p)
	}
	a, b := &item{rec: &kgo.Record{Offset: 5}}, &item{rec: &kgo.Record{Offset: 9}}
	tr.add(a)
	tr.add(b)
	tr.start()
	tr.start()
	for _, step := range []struct {
		finish *item
		want   int64
	}{{nil, 5}, {b, 5}, {a, 10}} {
		if step.finish != nil {
			tr.finish(step.finish, fateDelivered)
		}
		if p := tr.position(); p != step.want {
			t.Fatalf("position %d, want %d", p, step.want)
		}
	}
}

// TestPartitionTrackerByDue: a retry tier's records start in due order (a record to dead-letter at
// once first, ties by offset), while the commit point advances only over the finished prefix in
// offset order, and the window counts what is held from the first unfinished record on.
func TestPartitionTrackerByDue(t *testing.T) {
	base := time.Unix(1000, 0)
	tr := newPartitionTracker(true)
	var its []*item
	for i, due := range []time.Duration{3, 1, 2, 1} {
		it := &item{rec: &kgo.Record{Offset: int64(10 + i)}, due: base.Add(due * time.Second), size: 100}
		its = append(its, it)
		tr.add(it)
	}
	pre := &item{rec: &kgo.Record{Offset: 14}, due: base.Add(9 * time.Second), size: 50, pre: &failure{}}
	tr.add(pre)
	if n, b := tr.window(); n != 5 || b != 450 {
		t.Fatalf("window %d records %d bytes, want 5 and 450", n, b)
	}
	var order []int64
	for tr.peek() != nil {
		order = append(order, tr.peek().rec.Offset)
		tr.start()
	}
	if want := []int64{14, 11, 13, 12, 10}; !slices.Equal(order, want) {
		t.Fatalf("start order %v, want %v", order, want)
	}
	for _, it := range []*item{pre, its[1], its[3], its[2]} {
		if adv, live := tr.finish(it, fateDelivered); adv || !live {
			t.Fatalf("finishing offset %d before offset 10: advanced %v live %v, want false true", it.rec.Offset, adv, live)
		}
	}
	if adv, _ := tr.finish(its[0], fateDelivered); !adv {
		t.Fatal("finishing offset 10 must advance the commit point")
	}
	if off, _, release, ok := tr.committable(); !ok || off != 15 || release != 5 {
		t.Fatalf("committable %d (release %d, ok %v), want 15, 5", off, release, ok)
	}
	if n, b := tr.window(); n != 0 || b != 0 {
		t.Fatalf("window after the prefix finished: %d records %d bytes, want 0", n, b)
	}
}
