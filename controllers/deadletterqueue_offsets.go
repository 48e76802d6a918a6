package controllers

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// offsetsCache batches the offset reads of every DeadLetterQueue on one connection: a refresh lists
// the start and end offsets of all their topics in one ListOffsets round (one request for the start
// offsets and one for the end offsets per partition leader; on a single broker, exactly two), and the
// queues that resync within the same refresh interval read that snapshot instead of asking Kafka
// again. So a resync costs one round per connection, not one per topic.
//
// Whichever reconcile first finds the snapshot older than its refresh interval refreshes it; the
// others that arrive meanwhile wait for that refresh (single flight). A queue whose topic is not in
// the snapshot yet (just created, or just claimed) has its topic listed alone and merged in, so that
// new queues do not force a full round. The snapshot is therefore at most one interval old.
type offsetsCache struct {
	clock clock.PassiveClock

	mu     sync.Mutex
	groups map[string]*offsetGroup // by kafka.Connection.Key
	member map[types.NamespacedName]string
}

// offsetGroup is the snapshot of one connection.
type offsetGroup struct {
	topics   map[types.NamespacedName]string // member queue -> its topic
	snapshot map[string][]kafka.PartitionOffsets
	taken    time.Time
	inflight *offsetRefresh
}

// offsetRefresh is a refresh under way; done is closed when it ends.
type offsetRefresh struct {
	done chan struct{}
	err  error
}

func newOffsetsCache(c clock.PassiveClock) *offsetsCache {
	return &offsetsCache{clock: c, groups: map[string]*offsetGroup{}, member: map[types.NamespacedName]string{}}
}

// Offsets returns the offsets of topic, read by who over the connection connKey (admin is its
// client), no older than maxAge, and when they were read. A topic that does not exist has no
// offsets (nil).
func (c *offsetsCache) Offsets(ctx context.Context, admin kafka.Admin, connKey string, who types.NamespacedName, topic string, maxAge time.Duration) ([]kafka.PartitionOffsets, time.Time, error) {
	for {
		c.mu.Lock()
		g := c.join(connKey, who, topic)
		now := c.clock.Now()
		fresh := !g.taken.IsZero() && now.Sub(g.taken) < maxAge
		if fresh {
			if po, ok := g.snapshot[topic]; ok {
				taken := g.taken
				c.mu.Unlock()
				return po, taken, nil
			}
			c.mu.Unlock()
			return c.listOne(ctx, admin, connKey, topic)
		}
		if r := g.inflight; r != nil {
			c.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, time.Time{}, ctx.Err()
			}
			if r.err != nil {
				return c.afterFailedRound(ctx, admin, connKey, topic, r.err)
			}
			continue // the refresh that just ended is fresh enough unless maxAge is tiny
		}
		r := &offsetRefresh{done: make(chan struct{})}
		g.inflight = r
		topics := slices.Sorted(maps.Values(g.topics))
		c.mu.Unlock()

		// The refresh serves every waiter: it must not end with this caller's context.
		got, err := admin.ListOffsets(context.WithoutCancel(ctx), slices.Compact(topics)...)

		c.mu.Lock()
		r.err = err
		g.inflight = nil
		if err == nil {
			g.snapshot, g.taken = got, now
			if g.snapshot == nil {
				g.snapshot = map[string][]kafka.PartitionOffsets{}
			}
			for _, t := range topics {
				if _, ok := g.snapshot[t]; !ok {
					g.snapshot[t] = nil // missing topic: no offsets
				}
			}
		}
		close(r.done)
		po := g.snapshot[topic]
		c.mu.Unlock()
		if err != nil {
			return c.afterFailedRound(ctx, admin, connKey, topic, err)
		}
		return po, now, nil
	}
}

// afterFailedRound isolates one queue's trouble from the others: when a round fails for lack of
// authorisation (an ACL denying one of the topics fails the whole request), each queue lists its own
// topic alone, so only the queue whose topic is denied reports it. Other failures (an unreachable
// broker) concern every queue alike and are returned as they are.
func (c *offsetsCache) afterFailedRound(ctx context.Context, admin kafka.Admin, connKey, topic string, err error) ([]kafka.PartitionOffsets, time.Time, error) {
	if !kafka.IsAuthError(err) {
		return nil, time.Time{}, err
	}
	return c.listOne(ctx, admin, connKey, topic)
}

// listOne lists the offsets of one topic and merges them into the snapshot, keeping the snapshot's
// time (the merged entry is fresher than that).
func (c *offsetsCache) listOne(ctx context.Context, admin kafka.Admin, connKey, topic string) ([]kafka.PartitionOffsets, time.Time, error) {
	now := c.clock.Now()
	got, err := admin.ListOffsets(ctx, topic)
	if err != nil {
		return nil, time.Time{}, err
	}
	c.Set(connKey, topic, got[topic])
	return got[topic], now, nil
}

// Set replaces the offsets of topic in the snapshot of connKey, after this operator changed them
// (created the topic, deleted records), so that the next readers see the change.
func (c *offsetsCache) Set(connKey, topic string, po []kafka.PartitionOffsets) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if g, ok := c.groups[connKey]; ok && g.snapshot != nil {
		g.snapshot[topic] = slices.Clone(po)
	}
}

// Forget removes who from every snapshot group; a group left without members is dropped.
func (c *offsetsCache) Forget(who types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leave(who)
}

// join makes who a member of the group of connKey with topic. c.mu must be held.
func (c *offsetsCache) join(connKey string, who types.NamespacedName, topic string) *offsetGroup {
	if old, ok := c.member[who]; ok && old != connKey {
		c.leave(who)
	}
	g, ok := c.groups[connKey]
	if !ok {
		g = &offsetGroup{topics: map[types.NamespacedName]string{}}
		c.groups[connKey] = g
	}
	g.topics[who] = topic
	c.member[who] = connKey
	return g
}

// leave removes who from its group. c.mu must be held.
func (c *offsetsCache) leave(who types.NamespacedName) {
	key, ok := c.member[who]
	if !ok {
		return
	}
	delete(c.member, who)
	g := c.groups[key]
	delete(g.topics, who)
	if len(g.topics) == 0 && g.inflight == nil {
		delete(c.groups, key)
	}
}
