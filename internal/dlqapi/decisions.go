package dlqapi

import (
	"context"
	"errors"
	"maps"
	"time"
	"unsafe"

	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
)

// decision is one decision as the cache keeps it: its time and replay count inline, and what
// decisions share (they are made by actions, a few thousand at a time: state, note, requester,
// action, topic ID) as an index in its snapshot's table of distinct values, kept once each.
type decision struct {
	sec     int64
	nsec    int32
	replays int32
	shared  uint32
}

// decisions are the decisions on a queue's records as read: never changed once handed out (a
// later read appends to shared only beyond the len of the slice a snapshot holds).
type decisions struct {
	byID   map[deadletters.ID]decision
	shared []deadletters.State // Time and ReplayCount zero
}

// Get returns the decision on id (the zero, Pending, State when it has none).
func (d *decisions) Get(id deadletters.ID) deadletters.State {
	if d == nil {
		return deadletters.State{}
	}
	x, ok := d.byID[id]
	if !ok {
		return deadletters.State{}
	}
	st := d.shared[x.shared]
	st.Time = time.Unix(x.sec, int64(x.nsec)).UTC()
	st.ReplayCount = int(x.replays)
	return st
}

// Estimates of the memory the cache takes (TestDecisionBytes measures them): a decision in byID
// (its 40 bytes of key and value, and the map's slack right after it grows), and a distinct shared
// value without its strings (in shared and as the key of the interning index); its strings count
// an eighth more than their length (the allocator's size classes).
const (
	decisionBytes = 96
	sharedBytes   = 2*int(unsafe.Sizeof(deadletters.State{})) + 64
)

// interner builds a decisions: one copy of every distinct shared value, and an honest estimate of
// the memory taken.
type interner struct {
	d     *decisions
	index map[deadletters.State]uint32
	bytes int
}

func newInterner() *interner {
	return &interner{d: &decisions{byID: map[deadletters.ID]decision{}}, index: map[deadletters.State]uint32{}}
}

// fork returns an interner writing a copy of d's decisions, sharing its table (appended to beyond
// what d sees).
func (in *interner) fork() *interner {
	return &interner{d: &decisions{byID: maps.Clone(in.d.byID), shared: in.d.shared}, index: in.index, bytes: in.bytes}
}

// set records st as the decision on id (removing it when st is Pending).
func (in *interner) set(id deadletters.ID, st deadletters.State) {
	_, had := in.d.byID[id]
	if st.Pending() {
		if had {
			delete(in.d.byID, id)
			in.bytes -= decisionBytes
		}
		return
	}
	if !had {
		in.bytes += decisionBytes
	}
	in.d.byID[id] = decision{sec: st.Time.Unix(), nsec: int32(st.Time.Nanosecond()), replays: int32(st.ReplayCount), shared: in.intern(st)}
}

func (in *interner) intern(st deadletters.State) uint32 {
	st.Time, st.ReplayCount = time.Time{}, 0
	if i, ok := in.index[st]; ok {
		return i
	}
	i := uint32(len(in.d.shared))
	in.d.shared = append(in.d.shared, st)
	in.index[st] = i
	n := len(st.State) + len(st.Note) + len(st.RequestedBy) + len(st.Action.Namespace) + len(st.Action.Name) + len(st.Action.UID) + len(st.TopicID)
	in.bytes += sharedBytes + n + n/8
	return i
}

// compacted returns an interner of the same decisions whose table holds only the values they use
// (values of decisions replaced or dropped stay in the table until then).
func (in *interner) compacted() *interner {
	out := newInterner()
	for id, x := range in.d.byID {
		st := in.d.shared[x.shared]
		st.Time = time.Unix(x.sec, int64(x.nsec))
		st.ReplayCount = int(x.replays)
		out.set(id, st)
	}
	return out
}

// stateSource gives a list or a get the decisions on a queue's records: all of them, kept by the
// cache, or, for a queue with more than the cache keeps of it, those of one range of offsets at a
// time, read from the whole record of decisions each time (memory follows the range; time follows
// the record of decisions).
type stateSource struct {
	all     *decisions // nil: read per range
	admin   kafka.Admin
	sc      kafka.Scanner
	q       Queue
	topicID string
}

// forRange returns the decisions on the records [from, to) of partition part (at least).
func (src *stateSource) forRange(ctx context.Context, part int32, from, to int64) (*decisions, error) {
	if src.all != nil || src.admin == nil {
		return src.all, nil
	}
	in := newInterner()
	_, err := deadletters.ScanStates(ctx, src.admin, src.sc, src.q.Conn, src.q.Topic, nil, func(id deadletters.ID, st deadletters.State, err error) {
		switch {
		case err != nil, id.Partition != part, id.Offset < from, id.Offset >= to:
		case !st.BelongsTo(src.topicID):
			in.set(id, deadletters.State{})
		default:
			in.set(id, st)
		}
	})
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return &decisions{}, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return in.d, nil
}
