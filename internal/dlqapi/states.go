package dlqapi

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Bounds of the cache of decisions.
const (
	// maxCachedQueues bounds the queues whose decisions are kept; the least recently read goes.
	maxCachedQueues = 64
	// maxCachedStateBytes bounds the decisions kept for one queue (an estimate of their memory,
	// decisionBytes and sharedBytes: about 100 bytes a decision made by an action of many): a queue
	// with more is read per range (stateSource.forRange): each chunk a page reads reads the whole
	// record of decisions and keeps only the decisions on the chunk's records, so that a request's
	// memory follows its page (its time follows the record of decisions); the cache tries to keep
	// them again after overRetry.
	maxCachedStateBytes = 16 << 20
	// maxCachedBytes bounds the decisions kept for all queues together (sized for the smallest
	// manager limit docs/operator.md advises, 256Mi):
	// the least recently read other queues go.
	maxCachedBytes = 32 << 20
)

// stateCache keeps, per queue topic, the decisions on the dead letters its topic holds, decoded
// and compact (decisions.go: what the decisions of an action share is kept once), and where in the
// record of decisions it read them to: a request reads only the decisions
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
	bytes    int             // estimated memory of kept
	kept     *interner       // the decisions kept, and their table of shared values
	starts   map[int32]int64 // the dead letter topic's start offsets kept was pruned to
	complete bool            // next, kept and the IDs are valid
	charged  int             // bytes counted in the cache's total (stateCache.mu)
	overAt   time.Time       // when the decisions were found to be more than the cache keeps of one
	overIDs  string          // of the topics with these IDs
}

func (c *stateCache) queue(key string, now time.Time) *queueStates {
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
	qs.used = now
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

// errTooMany is advance's error for a queue whose decisions are more than the cache keeps of one.
var errTooMany = errors.New("more decisions than the cache keeps of a queue")

// overRetry is how long a queue found to have more decisions than the cache keeps of one is read
// per range before the cache tries to keep them again (its decisions may have gone since).
const overRetry = time.Minute

// loadStates returns the decisions on the dead letters q's topic holds now that belong to it
// (deadletters.State.BelongsTo: made on this topic ID, or unbound): all of them from the cache, or,
// for a queue with more than the cache keeps of one, a source that reads those of one range of
// offsets at a time (stateSource.forRange); none when the queue has no record of decisions.
// Kafka's errors are Unavailable.
func (s *Storage) loadStates(ctx context.Context, admin kafka.Admin, q Queue) (*stateSource, error) {
	none := &stateSource{all: &decisions{}}
	stateTopic, ok := deadletters.StateTopic(q.Topic)
	if !ok {
		return none, nil
	}
	ids, err := admin.TopicIDs(ctx, q.Topic, stateTopic)
	if err != nil {
		return nil, unavailable(err)
	}
	topicID, okT := ids[q.Topic]
	stateID, okS := ids[stateTopic]
	if !okT || !okS {
		return none, nil
	}
	// The record of decisions' offsets first, then the topic's: every decision read (recorded
	// before the first listing) is on a record below the ends of the second, so a decision at or
	// beyond them is on no dead letter.
	stateOffs, err := admin.ListOffsets(ctx, stateTopic)
	if err != nil {
		return nil, unavailable(err)
	}
	span, ok := stateOffs[stateTopic]
	if !ok {
		return none, nil
	}
	offs, err := admin.ListOffsets(ctx, q.Topic)
	if err != nil {
		return nil, unavailable(err)
	}
	starts := map[int32]int64{}
	ends := map[int32]int64{}
	for _, p := range offs[q.Topic] {
		starts[p.Partition], ends[p.Partition] = p.Start, p.End
	}
	key := q.Conn.Key() + "\x00" + q.Topic
	clk := s.clock()
	qs := s.cache.queue(key, clk.Now())
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.overAt.IsZero() || qs.overIDs != topicID+"\x00"+stateID || clk.Since(qs.overAt) >= overRetry {
		all, err := qs.advance(ctx, s.Kafka, q, topicID, stateID, span, starts, ends)
		s.cache.charge(key, qs)
		switch {
		case errors.Is(err, kafka.ErrTopicNotFound):
			return none, nil
		case err == nil:
			qs.overAt, qs.overIDs = time.Time{}, ""
			return &stateSource{all: all}, nil
		case !errors.Is(err, errTooMany):
			return nil, unavailable(err)
		}
		qs.overAt, qs.overIDs = clk.Now(), topicID+"\x00"+stateID
	}
	return &stateSource{admin: admin, sc: s.Kafka, q: q, topicID: topicID}, nil
}

// advance brings the decisions kept up to span, the end of the record of decisions as listed, and
// returns them: from where the last read stopped when the topics are the same (same IDs, no record
// below that point removed), else from the start, or from where the reconciler found that every
// record before is superseded or on no dead letter held (deadletters.FindReadFrom). Decisions on
// records outside [starts, ends) are dropped. It stops reading, keeps nothing and returns
// errTooMany as soon as the decisions take more than maxCachedStateBytes.
func (qs *queueStates) advance(ctx context.Context, sc kafka.Scanner, q Queue, topicID, stateID string, span []kafka.PartitionOffsets, starts, ends map[int32]int64) (*decisions, error) {
	from := qs.next
	fresh := !qs.complete || qs.topicID != topicID || qs.stateID != stateID || len(starts) != len(qs.starts)
	for p, start := range starts {
		if was, ok := qs.starts[p]; !ok || start < was {
			// A partition new to the cache, or a start offset gone back (a topic created again on
			// brokers without topic IDs): the decisions dropped as gone may be back.
			fresh = true
		}
	}
	held := func(id deadletters.ID) bool {
		start, ok := starts[id.Partition]
		return ok && id.Offset >= start && id.Offset < ends[id.Partition]
	}
	var cur *interner // the copy being written, made at the first change
	var rf *deadletters.ReadFrom
	if !fresh {
		for id := range qs.kept.d.byID {
			if !held(id) {
				cur = qs.kept.fork()
				break
			}
		}
	} else {
		cur = newInterner()
		var err error
		if rf, err = deadletters.FindReadFrom(ctx, sc, q.Conn, q.Topic, topicID, span); err != nil {
			qs.complete = false
			return nil, err
		}
	}
	scanCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	over := false
	record := func(id deadletters.ID, st deadletters.State, err error) {
		if over || err != nil {
			return // an invalid record leaves an earlier valid decision on its key
		}
		if cur == nil {
			cur = qs.kept.fork()
		}
		if !held(id) || !st.BelongsTo(topicID) {
			st = deadletters.State{}
		}
		cur.set(id, st)
		if cur.bytes > maxCachedStateBytes && len(cur.d.shared) > 2*len(cur.d.byID)+1024 {
			// The values of decisions replaced take room in the table: drop them.
			cur = cur.compacted()
		}
		if cur.bytes > maxCachedStateBytes {
			over = true
			cancel()
		}
	}
	var err error
	if fresh {
		err = deadletters.ScanStatesFrom(scanCtx, sc, q.Conn, q.Topic, span, rf, record)
	} else {
		err = deadletters.ScanStatesAt(scanCtx, sc, q.Conn, q.Topic, span, from, record)
	}
	if over {
		qs.complete, qs.kept, qs.bytes = false, nil, 0
		return nil, errTooMany
	}
	if err != nil {
		qs.complete = false
		return nil, err
	}
	next := map[int32]int64{}
	for _, p := range span {
		next[p.Partition] = p.End
		if was, ok := from[p.Partition]; !fresh && (!ok || p.Start > was || p.End < was) {
			// Records were removed below where the last read stopped, the partition holds fewer than
			// were read, or it is new: what is kept may be stale. Read it all again.
			qs.complete = false
			return qs.advance(ctx, sc, q, topicID, stateID, span, starts, ends)
		}
	}
	if !fresh && len(from) != len(next) {
		qs.complete = false
		return qs.advance(ctx, sc, q, topicID, stateID, span, starts, ends)
	}
	if cur == nil {
		cur = qs.kept // unchanged, and every decision kept is on a record held
	} else {
		for id := range cur.d.byID {
			if !held(id) {
				cur.set(id, deadletters.State{})
			}
		}
	}
	if cur.bytes > maxCachedStateBytes || len(cur.d.shared) > 2*len(cur.d.byID)+1024 {
		// The values of decisions replaced or dropped take room in the table: drop them.
		cur = cur.compacted()
	}
	if cur.bytes > maxCachedStateBytes {
		qs.complete, qs.kept, qs.bytes = false, nil, 0
		return nil, errTooMany
	}
	qs.complete, qs.topicID, qs.stateID, qs.next, qs.kept, qs.bytes, qs.starts = true, topicID, stateID, next, cur, cur.bytes, starts
	return cur.d, nil
}
