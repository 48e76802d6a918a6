package apply

import (
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultCacheTTL is how long an entry of a Cache lives unused.
const DefaultCacheTTL = 10 * time.Minute

// Cache remembers applies found unnecessary, by a key naming what makes them so: the child's
// version as the manager's cache shows it (its UID and resourceVersion), with the digest of what was
// last applied over it (Owned: applied already over that version, the watch event not seen yet) or
// of the inputs of its rendering last found equal to it (OwnedRendered). While the key holds the
// same digest the write, or the rendering, is skipped; only the last digest counts, since the child
// holds what was applied last (inputs changed and changed back before the cache caught up are
// applied again). An entry expires once unused for its TTL: a key names a version, so the entry of
// a version that is gone is never used again and goes by itself, and nothing has to be forgotten
// when an owner goes. A nil *Cache holds nothing (every apply compares
// and writes as it would without one). It is safe for concurrent use.
type Cache struct {
	clock clock.PassiveClock
	ttl   time.Duration

	mu      sync.Mutex
	used    map[cacheKey]cacheEntry
	sweptAt time.Time
}

// cacheEntry is the digest a key holds, and when it was last used.
type cacheEntry struct {
	sum  [sha256.Size]byte
	used time.Time
}

// NewCache returns an empty cache whose entries live ttl unused (DefaultCacheTTL when not
// positive), on clk (the real clock when nil).
func NewCache(clk clock.PassiveClock, ttl time.Duration) *Cache {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	return &Cache{clock: clk, ttl: ttl, used: map[cacheKey]cacheEntry{}, sweptAt: clk.Now()}
}

// cacheKey names a child's version; what says which use its digest is of (an apply's or a
// rendering's inputs).
type cacheKey struct {
	what      byte
	owner     types.UID
	gvk       schema.GroupVersionKind
	namespace string
	name      string
	uid       types.UID
	version   string
}

const (
	keyApplied byte = iota + 1
	keyRendered
)

// appliedKey is the key of an apply of u (u's controller reference to owner set) over live.
func appliedKey(owner client.Object, u *unstructured.Unstructured, live client.Object) cacheKey {
	return cacheKey{what: keyApplied, owner: owner.GetUID(), gvk: u.GroupVersionKind(), namespace: u.GetNamespace(), name: u.GetName(),
		uid: live.GetUID(), version: live.GetResourceVersion()}
}

// renderedKey is the key of owner's child live of kind gvk found equal to a rendering; false when
// owner does not control live (such a child is never skipped: Owned reports the conflict).
func renderedKey(owner client.Object, gvk schema.GroupVersionKind, live client.Object) (cacheKey, bool) {
	ref := metav1.GetControllerOf(live)
	if ref == nil || ref.UID != owner.GetUID() {
		return cacheKey{}, false
	}
	return cacheKey{what: keyRendered, owner: owner.GetUID(), gvk: gvk, namespace: live.GetNamespace(), name: live.GetName(),
		uid: live.GetUID(), version: live.GetResourceVersion()}, true
}

// has reports whether k holds sum, and keeps it for another TTL if so.
func (c *Cache) has(k cacheKey, sum [sha256.Size]byte) bool {
	if c == nil {
		return false
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.used[k]
	if ok && now.Sub(e.used) > c.ttl {
		delete(c.used, k)
		ok = false
	}
	ok = ok && e.sum == sum
	if ok {
		c.used[k] = cacheEntry{sum: sum, used: now}
	}
	c.sweep(now)
	return ok
}

// add makes k hold sum, in place of what it held.
func (c *Cache) add(k cacheKey, sum [sha256.Size]byte) {
	if c == nil {
		return
	}
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.used[k] = cacheEntry{sum: sum, used: now}
	c.sweep(now)
}

// sweep drops, at most once per TTL, the entries unused for longer; c.mu is held. An entry thus
// lives at most two TTLs unused, and the cache holds what the last two TTLs used.
func (c *Cache) sweep(now time.Time) {
	if now.Sub(c.sweptAt) < c.ttl {
		return
	}
	for k, e := range c.used {
		if now.Sub(e.used) > c.ttl {
			delete(c.used, k)
		}
	}
	c.sweptAt = now
}

// Len is the number of entries held, expired ones not swept yet included.
func (c *Cache) Len() int {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.used)
}

// sumOf is a digest of what is applied (encoding/json sorts map keys).
func sumOf(u *unstructured.Unstructured) ([sha256.Size]byte, bool) {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return [sha256.Size]byte{}, false
	}
	return sha256.Sum256(b), true
}
