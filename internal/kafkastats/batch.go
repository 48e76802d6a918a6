package kafkastats

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/lease"
)

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
//
// A member is held for lease.For(maxAge) after each of its reads: one that stops reading (its
// resource was deleted) leaves its group by itself, and a group left without members is dropped.
type batchedReads[V any] struct {
	clock clock.PassiveClock
	read  func(ctx context.Context, admin kafka.Admin, keys []string) (map[string]V, error)

	mu     sync.Mutex
	groups map[string]*readGroup[V] // by kafka.Connection.Key
	member map[string]string        // member -> connection key
	leases lease.Table[string]      // of the members
	// unsettled are the members whose next read must be fresh (Topics.Unsettle), with when they
	// were marked; a member leaving takes its mark with it.
	unsettled map[string]time.Time
}

// readGroup is the snapshot of one connection.
type readGroup[V any] struct {
	keys     map[string][]string // member -> the keys it reads
	snapshot map[string]V        // a key read and not found has the zero value
	taken    time.Time
	inflight *readRound
	// written counts the values written in (Set, a read alone); setAt is when (by that count) each
	// key was last written. A round that ends keeps what was written since it started: its own
	// reading of those keys may predate the change that wrote them.
	written uint64
	setAt   map[string]uint64
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
		now := b.clock.Now()
		g := b.join(connKey, member, keys, now, lease.For(maxAge))
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
		startedAt := g.written
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
			snapshot := make(map[string]V, len(all))
			for _, k := range all {
				snapshot[k] = got[k] // missing: the zero value
			}
			for k, at := range g.setAt {
				if at <= startedAt {
					delete(g.setAt, k)
					continue
				}
				if v, ok := g.snapshot[k]; ok {
					snapshot[k] = v
				} else {
					delete(snapshot, k) // dropped: read alone next time
				}
			}
			g.snapshot, g.taken = snapshot, now
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
		if g != nil {
			g.put(k, got[k])
		}
	}
	return out, now, nil
}

// ReadFresh reads keys for member now, whatever the snapshot holds, makes them the member's keys
// (the next round reads them) and merges what it read into the snapshot, so that the readers after
// it see it.
func (b *batchedReads[V]) ReadFresh(ctx context.Context, admin kafka.Admin, connKey, member string, keys []string) (map[string]V, error) {
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	b.mu.Lock()
	b.join(connKey, member, keys, b.clock.Now(), lease.Min)
	b.mu.Unlock()
	out, _, err := b.readAlone(ctx, admin, connKey, keys)
	return out, err
}

// put writes v as the value of key. The caller holds the lock. Before the first round the values
// wait in a snapshot not taken yet (taken zero), which the round keeps.
func (g *readGroup[V]) put(key string, v V) {
	if g.snapshot == nil {
		g.snapshot = map[string]V{}
	}
	g.snapshot[key] = v
	g.touch(key)
}

// touch records that key was written now. The caller holds the lock.
func (g *readGroup[V]) touch(key string) {
	g.written++
	if g.setAt == nil {
		g.setAt = map[string]uint64{}
	}
	g.setAt[key] = g.written
}

// Set replaces the value of key in the snapshot of connKey, if there is one.
func (b *batchedReads[V]) Set(connKey, key string, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g, ok := b.groups[connKey]; ok {
		g.put(key, v)
	}
}

// Drop removes key from the snapshot of connKey, so that its next reader reads it alone.
func (b *batchedReads[V]) Drop(connKey, key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g, ok := b.groups[connKey]; ok {
		delete(g.snapshot, key)
		g.touch(key)
	}
}

// Peek returns the value of key in the snapshot of connKey and when the snapshot was taken (also
// when the snapshot lacks key).
func (b *batchedReads[V]) Peek(connKey, key string) (v V, taken time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g, found := b.groups[connKey]
	if !found || g.taken.IsZero() {
		return v, taken, false
	}
	v, ok = g.snapshot[key]
	return v, g.taken, ok
}

// members is the number of members held.
func (b *batchedReads[V]) members() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.member)
}

// Forget removes member from its group; a group left without members is dropped.
func (b *batchedReads[V]) Forget(member string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.leave(member)
}

// mark sets (or clears) the unsettled mark of member. A mark whose member reads nothing within
// lease.Min of it goes at the next mark, so that marks of members that never come back do not pile up.
func (b *batchedReads[V]) mark(member string, unsettled bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !unsettled {
		delete(b.unsettled, member)
		return
	}
	now := b.clock.Now()
	if b.unsettled == nil {
		b.unsettled = map[string]time.Time{}
	}
	for m, at := range b.unsettled {
		if _, ok := b.member[m]; !ok && now.Sub(at) > lease.Min {
			delete(b.unsettled, m)
		}
	}
	b.unsettled[member] = now
}

// marked reports whether member is marked unsettled.
func (b *batchedReads[V]) marked(member string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.unsettled[member]
	return ok
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

// join makes member a member of the group of connKey reading keys, held for d from now, and lets
// go of the members whose lease expired. b.mu must be held.
func (b *batchedReads[V]) join(connKey, member string, keys []string, now time.Time, d time.Duration) *readGroup[V] {
	for _, m := range b.leases.Expired(now) {
		if m == member {
			continue // back just in time: joins again below
		}
		b.leave(m)
	}
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
	b.leases.Renew(member, now, d)
	return g
}

// leave removes member from its group. b.mu must be held.
func (b *batchedReads[V]) leave(member string) {
	b.leases.Drop(member)
	delete(b.unsettled, member)
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
