package dlqapi

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Bounds of the cache of decisions.
const (
	// maxCachedQueues bounds the queues whose decisions are kept; the least recently read goes.
	maxCachedQueues = 64
	// maxCachedStateBytes bounds the decisions kept for one queue (an estimate of their memory): a
	// queue with more is read whole on every request, keeping only those on the records held.
	maxCachedStateBytes = 16 << 20
	// maxCachedBytes bounds the decisions kept for all queues together (the manager has 256 MiB):
	// the least recently read other queues go.
	maxCachedBytes = 32 << 20
)

// stateCache keeps, per queue topic, the decisions on the dead letters its topic holds, decoded,
// and where in the record of decisions it read them to: a request reads only the decisions
// recorded since the last one (usually none), so a page costs what the page reads, not the history
// of decisions. Every replica serving the API has its own. A snapshot handed out is never changed.
type stateCache struct {
	mu     sync.Mutex
	queues map[string]*queueStates // by connection key and topic
	total  int                     // the bytes charged to the queues kept
}

// queueStates is what the cache keeps of one queue topic.
type queueStates struct {
	mu       sync.Mutex // one reader of the record of decisions at a time
	used     time.Time
	topicID  string          // the dead letter topic's ID the decisions kept belong to
	stateID  string          // the state topic's ID they were read from
	next     map[int32]int64 // per partition of the state topic, where the next read starts
	bytes    int             // estimated memory of states
	states   *deadletters.States
	starts   map[int32]int64 // the dead letter topic's start offsets states was pruned to
	complete bool            // next, states and the IDs are valid
	charged  int             // bytes counted in the cache's total (stateCache.mu)
}

func (c *stateCache) queue(key string) *queueStates {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queues == nil {
		c.queues = map[string]*queueStates{}
	}
	qs, ok := c.queues[key]
	if !ok {
		if len(c.queues) >= maxCachedQueues {
			var oldest string
			for k, v := range c.queues {
				if oldest == "" || v.used.Before(c.queues[oldest].used) {
					oldest = k
				}
			}
			c.total -= c.queues[oldest].charged
			delete(c.queues, oldest)
		}
		qs = &queueStates{}
		c.queues[key] = qs
	}
	qs.used = time.Now()
	return qs
}

// charge counts what qs (the queue key, its lock held) keeps now in the cache's total, and lets the
// least recently read other queues go while the total is above maxCachedBytes.
func (c *stateCache) charge(key string, qs *queueStates) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.queues[key] != qs {
		return // let go meanwhile
	}
	c.total += qs.bytes - qs.charged
	qs.charged = qs.bytes
	for c.total > maxCachedBytes {
		var oldest string
		for k, v := range c.queues {
			if k != key && (oldest == "" || v.used.Before(c.queues[oldest].used)) {
				oldest = k
			}
		}
		if oldest == "" {
			return
		}
		c.total -= c.queues[oldest].charged
		delete(c.queues, oldest)
	}
}

// loadStates returns the decisions on the dead letters q's topic holds now, that belong to it
// (deadletters.State.BelongsTo: made on this topic ID, or legacy), for which keep (nil: all) is
// true; none when the queue has no record of decisions. Kafka's errors are Unavailable.
func (s *Storage) loadStates(ctx context.Context, admin kafka.Admin, q Queue, keep func(deadletters.ID) bool) (*deadletters.States, error) {
	stateTopic, ok := deadletters.StateTopic(q.Topic)
	if !ok {
		return &deadletters.States{}, nil
	}
	ids, err := admin.TopicIDs(ctx, q.Topic, stateTopic)
	if err != nil {
		return nil, unavailable(err)
	}
	topicID, okT := ids[q.Topic]
	stateID, okS := ids[stateTopic]
	if !okT || !okS {
		return &deadletters.States{}, nil
	}
	offs, err := admin.ListOffsets(ctx, q.Topic)
	if err != nil {
		return nil, unavailable(err)
	}
	starts := map[int32]int64{}
	for _, p := range offs[q.Topic] {
		starts[p.Partition] = p.Start
	}
	key := q.Conn.Key() + "\x00" + q.Topic
	qs := s.cache.queue(key)
	qs.mu.Lock()
	defer qs.mu.Unlock()
	states, err := qs.advance(ctx, admin, s.Kafka, q, topicID, stateID, starts)
	s.cache.charge(key, qs)
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return &deadletters.States{}, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	if keep == nil {
		return states, nil
	}
	out := &deadletters.States{Invalid: states.Invalid, Foreign: states.Foreign}
	for id, st := range states.ByID {
		if keep(id) {
			out.Set(id, st)
		}
	}
	return out, nil
}

// advance brings the decisions kept up to the end of the record of decisions and returns them:
// from where the last read stopped when the topics are the same (same IDs, no record below that
// point removed), from the start otherwise. Decisions on records below starts are dropped.
func (qs *queueStates) advance(ctx context.Context, admin kafka.Admin, sc kafka.Scanner, q Queue, topicID, stateID string, starts map[int32]int64) (*deadletters.States, error) {
	from := qs.next
	if !qs.complete || qs.topicID != topicID || qs.stateID != stateID || len(starts) != len(qs.starts) {
		from = nil
	}
	for p, start := range starts {
		if was, ok := qs.starts[p]; !ok || start < was {
			// A partition new to the cache, or a start offset gone back (a topic created again on
			// brokers without topic IDs): the decisions dropped as gone may be back.
			from = nil
		}
	}
	held := func(id deadletters.ID) bool {
		start, ok := starts[id.Partition]
		return ok && id.Offset >= start
	}
	var (
		cur   *deadletters.States // the copy being written, made at the first change
		bytes = qs.bytes
	)
	if from != nil {
		for id := range qs.states.ByID {
			if !held(id) {
				cur = clone(qs.states)
				break
			}
		}
	} else {
		cur, bytes = &deadletters.States{ByID: map[deadletters.ID]deadletters.State{}}, 0
	}
	write := func() *deadletters.States {
		if cur == nil {
			cur = clone(qs.states)
		}
		return cur
	}
	span, err := deadletters.ScanStates(ctx, admin, sc, q.Conn, q.Topic, from, func(id deadletters.ID, st deadletters.State, err error) {
		w := write()
		old, had := w.ByID[id]
		switch {
		case err != nil:
			w.Invalid++
			return
		case !held(id):
			w.Set(id, deadletters.State{})
		case !st.BelongsTo(topicID):
			w.Foreign++
			w.Set(id, deadletters.State{})
		default:
			w.Set(id, st)
			bytes += stateBytes(st)
		}
		if had {
			bytes -= stateBytes(old)
		}
	})
	if err != nil {
		qs.complete = false
		return nil, err
	}
	next := map[int32]int64{}
	for _, p := range span {
		next[p.Partition] = p.End
		if was, ok := from[p.Partition]; from != nil && (!ok || p.Start > was || p.End < was) {
			// Records were removed below where the last read stopped, the partition holds fewer than
			// were read, or it is new: what is kept may be stale. Read it all again.
			qs.complete = false
			return qs.advance(ctx, admin, sc, q, topicID, stateID, starts)
		}
	}
	if from != nil && len(from) != len(next) {
		qs.complete = false
		return qs.advance(ctx, admin, sc, q, topicID, stateID, starts)
	}
	if cur != nil {
		for id, st := range cur.ByID {
			if !held(id) {
				delete(cur.ByID, id)
				bytes -= stateBytes(st)
			}
		}
	} else {
		cur = qs.states
	}
	if bytes > maxCachedStateBytes {
		// Not kept: read whole on every request.
		qs.complete, qs.states, qs.bytes = false, nil, 0
		return cur, nil
	}
	qs.complete, qs.topicID, qs.stateID, qs.next, qs.states, qs.bytes, qs.starts = true, topicID, stateID, next, cur, bytes, starts
	return cur, nil
}

func clone(s *deadletters.States) *deadletters.States {
	if s == nil {
		return &deadletters.States{ByID: map[deadletters.ID]deadletters.State{}}
	}
	return &deadletters.States{ByID: maps.Clone(s.ByID), Invalid: s.Invalid, Foreign: s.Foreign}
}

// stateBytes estimates the memory a decision takes in the cache.
func stateBytes(st deadletters.State) int {
	return 160 + len(st.Note) + len(st.RequestedBy) + len(st.Action.Namespace) + len(st.Action.Name) + len(st.Action.UID) + len(st.TopicID)
}
