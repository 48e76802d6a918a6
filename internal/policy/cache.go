package policy

import (
	"container/list"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/retry"
)

// DefaultCacheSize is the number of policies a Cache keeps when NewCache is given no size. A policy
// within the pattern budgets keeps at most about 0.5 MB compiled (retry.MaxPolicyInstructions), so
// a full cache of policies at the budget holds at most about 64 MB; typical policies keep a few
// kilobytes.
const DefaultCacheSize = 128

// Cache compiles RetryPolicies once per generation: the compiled policy (or the error that refused it)
// of a policy's UID and metadata.generation is kept until a newer generation of the same policy
// arrives, the policy is forgotten, or it is the least recently used of more than the cache's size.
// The spec, and so what it compiles to, changes only with the generation. It is safe for concurrent
// use; concurrent lookups of the same generation compile it once.
type Cache struct {
	mu    sync.Mutex
	size  int
	lru   *list.List // of *cacheEntry, most recently used first
	byUID map[types.UID]*list.Element
	count atomic.Int64
}

type cacheEntry struct {
	uid        types.UID
	generation int64
	once       sync.Once
	compiled   *retry.Compiled
	err        error
}

// NewCache returns a Cache of at most size policies (DefaultCacheSize when size < 1).
func NewCache(size int) *Cache {
	if size < 1 {
		size = DefaultCacheSize
	}
	return &Cache{size: size, lru: list.New(), byUID: map[types.UID]*list.Element{}}
}

// Compile returns retry.Compile(FromSpec(rp.Spec)), compiling it only the first time it is asked
// for rp's UID and generation. An invalid policy's error is kept too, so that a policy refused
// (for example for its pattern budget) is not compiled again at every reconcile. A policy without a
// UID (built in Go, never stored) is compiled every time. An older generation than the one kept
// (a stale read) is compiled without replacing it.
func (c *Cache) Compile(rp *retryv1alpha1.RetryPolicy) (*retry.Compiled, error) {
	if rp.UID == "" {
		return c.run(rp)
	}
	c.mu.Lock()
	var e *cacheEntry
	if el, ok := c.byUID[rp.UID]; ok {
		kept := el.Value.(*cacheEntry)
		switch {
		case kept.generation == rp.Generation:
			c.lru.MoveToFront(el)
			e = kept
		case kept.generation > rp.Generation:
			c.mu.Unlock()
			return c.run(rp)
		default:
			c.lru.Remove(el)
			delete(c.byUID, rp.UID)
		}
	}
	if e == nil {
		e = &cacheEntry{uid: rp.UID, generation: rp.Generation}
		c.byUID[rp.UID] = c.lru.PushFront(e)
		for c.lru.Len() > c.size {
			old := c.lru.Remove(c.lru.Back()).(*cacheEntry)
			delete(c.byUID, old.uid)
		}
	}
	c.mu.Unlock()
	e.once.Do(func() { e.compiled, e.err = c.run(rp) })
	return e.compiled, e.err
}

func (c *Cache) run(rp *retryv1alpha1.RetryPolicy) (*retry.Compiled, error) {
	c.count.Add(1)
	return retry.Compile(FromSpec(rp.Spec))
}

// Forget drops what is kept for a policy, for example once it is deleted.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byUID[uid]; ok {
		c.lru.Remove(el)
		delete(c.byUID, uid)
	}
}

// Compilations returns how many times the cache has compiled a policy.
func (c *Cache) Compilations() int64 { return c.count.Load() }

// Len returns the number of policies kept.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
