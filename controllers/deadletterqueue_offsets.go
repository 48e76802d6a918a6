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

// offsetsCache batches the offset reads of every DeadLetterQueue and ConsumerPipeline on one
// connection: a refresh lists the start and end offsets of all their topics (the queues' dead letter
// topics, the pipelines' sources and retry tiers) in one ListOffsets round (one request for the start
// offsets and one for the end offsets per partition leader; on a single broker, exactly two), and
// the resources that resync within the same refresh interval read that snapshot instead of asking
// Kafka again. So a resync costs one round per connection, not one per topic.
//
// Whichever reconcile first finds the snapshot older than its refresh interval refreshes it; the
// others that arrive meanwhile wait for that refresh (single flight). A resource whose topics are not
// in the snapshot yet (just created, or just claimed) has them listed alone and merged in, so that
// new resources do not force a full round. The snapshot is therefore at most one interval old.
type offsetsCache struct {
	reads *batchedReads[[]kafka.PartitionOffsets]
}

func newOffsetsCache(c clock.PassiveClock) *offsetsCache {
	return &offsetsCache{reads: newBatchedReads(c, func(ctx context.Context, admin kafka.Admin, topics []string) (map[string][]kafka.PartitionOffsets, error) {
		return admin.ListOffsets(ctx, topics...)
	})}
}

// Offsets returns the offsets of topic, read for the queue who over the connection connKey (admin is
// its client), no older than maxAge, and when they were read. A topic that does not exist has no
// offsets (nil).
func (c *offsetsCache) Offsets(ctx context.Context, admin kafka.Admin, connKey string, who types.NamespacedName, topic string, maxAge time.Duration) ([]kafka.PartitionOffsets, time.Time, error) {
	got, at, err := c.reads.Get(ctx, admin, connKey, dlqOwner(who), []string{topic}, maxAge)
	return got[topic], at, err
}

// TopicOffsets is Offsets for a resource with several topics; member names it (its connection
// registry owner, "ConsumerPipeline/<namespace>/<name>").
func (c *offsetsCache) TopicOffsets(ctx context.Context, admin kafka.Admin, connKey, member string, topics []string, maxAge time.Duration) (map[string][]kafka.PartitionOffsets, time.Time, error) {
	return c.reads.Get(ctx, admin, connKey, member, topics, maxAge)
}

// Set replaces the offsets of topic in the snapshot of connKey, after this operator changed them
// (created the topic, deleted records), so that the next readers see the change.
func (c *offsetsCache) Set(connKey, topic string, po []kafka.PartitionOffsets) {
	c.reads.Set(connKey, topic, slices.Clone(po))
}

// Peek returns the offsets of topic in the snapshot of connKey and when the snapshot was taken,
// without asking Kafka; ok is false when the snapshot does not hold the topic.
func (c *offsetsCache) Peek(connKey, topic string) (po []kafka.PartitionOffsets, taken time.Time, ok bool) {
	return c.reads.Peek(connKey, topic)
}

// UntilNextRound is when a resource of connection connKey, refreshed every interval, should resync
// next: just after the connection's snapshot goes stale. Resources that resync out of phase with the
// rounds read a snapshot up to an interval old, so a change could take two intervals to show; aligned,
// the first of them starts the round and the others read it fresh, so every figure shows within one
// interval, and there is still one round per interval. Without a snapshot it is interval.
func (c *offsetsCache) UntilNextRound(connKey string, interval time.Duration) time.Duration {
	_, taken, _ := c.reads.Peek(connKey, "")
	return untilNextRound(c.reads.clock.Now(), taken, interval)
}

// roundSlack is how long after a snapshot goes stale the aligned resyncs come, so that the first of
// them finds it stale for sure.
const roundSlack = 20 * time.Millisecond

// untilNextRound is the wait from now until just after the snapshot taken at taken goes stale,
// never under a tenth of the interval (that round is under way: take the next one) nor over it.
func untilNextRound(now, taken time.Time, interval time.Duration) time.Duration {
	if taken.IsZero() {
		return interval
	}
	d := taken.Add(interval + roundSlack).Sub(now)
	for d < interval/10 {
		d += interval
	}
	return min(d, interval)
}

// Forget removes the queue who from every snapshot group; a group left without members is dropped.
func (c *offsetsCache) Forget(who types.NamespacedName) {
	c.reads.Forget(dlqOwner(who))
}

// ForgetMember is Forget for a member named as in TopicOffsets.
func (c *offsetsCache) ForgetMember(member string) {
	c.reads.Forget(member)
}

// batchedReads batches one kind of read (the offsets of topics, the commits of consumer groups) over
// the resources that share a connection: each resource (a member) declares the keys it reads; a
// round reads the keys of every member of the connection with one call of read, at most once per
// interval, single flight; a member whose keys are missing from a fresh snapshot reads them alone
// and merges them in.
//
// A round refused for lack of authorisation (an ACL denying one of the keys fails the whole request)
// is not the business of every member: each then reads its own keys alone, so only the member whose
// key is denied reports it. Other failures (an unreachable broker) concern every member alike and
// reach each one as they are. A failed round is not cached.
type batchedReads[V any] struct {
	clock clock.PassiveClock
	read  func(ctx context.Context, admin kafka.Admin, keys []string) (map[string]V, error)

	mu     sync.Mutex
	groups map[string]*readGroup[V] // by kafka.Connection.Key
	member map[string]string        // member -> connection key
}

// readGroup is the snapshot of one connection.
type readGroup[V any] struct {
	keys     map[string][]string // member -> the keys it reads
	snapshot map[string]V        // a key read and not found has the zero value
	taken    time.Time
	inflight *readRound
}

// readRound is a round under way; done is closed when it ends.
type readRound struct {
	done chan struct{}
	err  error
}

func newBatchedReads[V any](c clock.PassiveClock, read func(context.Context, kafka.Admin, []string) (map[string]V, error)) *batchedReads[V] {
	return &batchedReads[V]{clock: c, read: read, groups: map[string]*readGroup[V]{}, member: map[string]string{}}
}

// Get returns the values of keys read for member over the connection connKey (admin is its
// client), no older than maxAge, and when they were read.
func (b *batchedReads[V]) Get(ctx context.Context, admin kafka.Admin, connKey, member string, keys []string, maxAge time.Duration) (map[string]V, time.Time, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	for {
		b.mu.Lock()
		g := b.join(connKey, member, keys)
		now := b.clock.Now()
		if !g.taken.IsZero() && now.Sub(g.taken) < maxAge {
			out, missing := g.lookup(keys)
			taken := g.taken
			b.mu.Unlock()
			if len(missing) == 0 {
				return out, taken, nil
			}
			alone, at, err := b.readAlone(ctx, admin, connKey, missing)
			if err != nil {
				return nil, time.Time{}, err
			}
			maps.Copy(out, alone)
			if len(missing) == len(keys) {
				taken = at
			}
			return out, taken, nil
		}
		if r := g.inflight; r != nil {
			b.mu.Unlock()
			select {
			case <-r.done:
			case <-ctx.Done():
				return nil, time.Time{}, ctx.Err()
			}
			if r.err != nil {
				return b.afterFailedRound(ctx, admin, connKey, keys, r.err)
			}
			continue // the round that just ended is fresh enough unless maxAge is tiny
		}
		r := &readRound{done: make(chan struct{})}
		g.inflight = r
		var all []string
		for _, ks := range g.keys {
			all = append(all, ks...)
		}
		all = slices.Compact(slices.Sorted(slices.Values(all)))
		b.mu.Unlock()

		// The round serves every waiter: it must not end with this caller's context.
		got, err := b.read(context.WithoutCancel(ctx), admin, all)

		b.mu.Lock()
		r.err = err
		g.inflight = nil
		if err == nil {
			g.snapshot, g.taken = make(map[string]V, len(all)), now
			for _, k := range all {
				g.snapshot[k] = got[k] // missing: the zero value
			}
		}
		close(r.done)
		out, _ := g.lookup(keys)
		if len(g.keys) == 0 && b.groups[connKey] == g {
			delete(b.groups, connKey) // every member left during the round
		}
		b.mu.Unlock()
		if err != nil {
			return b.afterFailedRound(ctx, admin, connKey, keys, err)
		}
		return out, now, nil
	}
}

// afterFailedRound reads the member's own keys alone after an authorisation failure; other failures
// are returned as they are.
func (b *batchedReads[V]) afterFailedRound(ctx context.Context, admin kafka.Admin, connKey string, keys []string, err error) (map[string]V, time.Time, error) {
	if !kafka.IsAuthError(err) {
		return nil, time.Time{}, err
	}
	return b.readAlone(ctx, admin, connKey, keys)
}

// readAlone reads keys and merges them into the snapshot, keeping the snapshot's time (the merged
// entries are fresher than that).
func (b *batchedReads[V]) readAlone(ctx context.Context, admin kafka.Admin, connKey string, keys []string) (map[string]V, time.Time, error) {
	now := b.clock.Now()
	got, err := b.read(ctx, admin, keys)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := make(map[string]V, len(keys))
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.groups[connKey]
	for _, k := range keys {
		out[k] = got[k]
		if g != nil && g.snapshot != nil {
			g.snapshot[k] = got[k]
		}
	}
	return out, now, nil
}

// Set replaces the value of key in the snapshot of connKey, if there is one.
func (b *batchedReads[V]) Set(connKey, key string, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g, ok := b.groups[connKey]; ok && g.snapshot != nil {
		g.snapshot[key] = v
	}
}

// Peek returns the value of key in the snapshot of connKey and when the snapshot was taken (also
// when the snapshot lacks key).
func (b *batchedReads[V]) Peek(connKey, key string) (v V, taken time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, found := b.groups[connKey]
	if !found || g.snapshot == nil {
		return v, taken, false
	}
	v, ok = g.snapshot[key]
	return v, g.taken, ok
}

// Forget removes member from its group; a group left without members is dropped.
func (b *batchedReads[V]) Forget(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leave(member)
}

// lookup returns the snapshot's values of keys and the keys it lacks. The caller holds the lock.
func (g *readGroup[V]) lookup(keys []string) (map[string]V, []string) {
	out := make(map[string]V, len(keys))
	var missing []string
	for _, k := range keys {
		v, ok := g.snapshot[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		out[k] = v
	}
	return out, missing
}

// join makes member a member of the group of connKey reading keys. b.mu must be held.
func (b *batchedReads[V]) join(connKey, member string, keys []string) *readGroup[V] {
	if old, ok := b.member[member]; ok && old != connKey {
		b.leave(member)
	}
	g, ok := b.groups[connKey]
	if !ok {
		g = &readGroup[V]{keys: map[string][]string{}}
		b.groups[connKey] = g
	}
	if !slices.Equal(g.keys[member], keys) {
		g.keys[member] = slices.Clone(keys)
	}
	b.member[member] = connKey
	return g
}

// leave removes member from its group. b.mu must be held.
func (b *batchedReads[V]) leave(member string) {
	key, ok := b.member[member]
	if !ok {
		return
	}
	delete(b.member, member)
	g := b.groups[key]
	delete(g.keys, member)
	if len(g.keys) == 0 && g.inflight == nil {
		delete(b.groups, key)
	}
}
