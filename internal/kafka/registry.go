package kafka

import (
	"context"
	"sync"
)

// Registry hands out admin clients and remembers which connection each user (a resource, named
// "Kind/namespace/name") uses, so that the client of a connection nobody uses any more (after a
// Secret rotation changed its Key) is closed at once instead of lingering until the factory's idle
// sweep. It is safe for concurrent use.
type Registry struct {
	factory AdminFactory

	mu    sync.Mutex
	owner map[string]string // user -> connection key
	users map[string]int    // connection key -> number of users
}

// NewRegistry returns a Registry over f.
func NewRegistry(f AdminFactory) *Registry {
	return &Registry{factory: f, owner: map[string]string{}, users: map[string]int{}}
}

// Admin returns the admin client of conn for owner, and the connection's key, and records the use.
func (r *Registry) Admin(ctx context.Context, owner string, conn Connection) (Admin, string, error) {
	key := conn.Key()
	r.use(owner, key)
	a, err := r.factory.Admin(ctx, conn)
	if err != nil {
		return nil, key, err
	}
	return a, key, nil
}

func (r *Registry) use(owner, key string) {
	r.mu.Lock()
	old, had := r.owner[owner]
	if had && old == key {
		r.mu.Unlock()
		return
	}
	r.owner[owner] = key
	r.users[key]++
	forget := had && r.drop(old)
	r.mu.Unlock()
	if forget {
		r.factory.Forget(old)
	}
}

// Release forgets owner, closing its client if nobody else uses it.
func (r *Registry) Release(owner string) {
	r.mu.Lock()
	old, had := r.owner[owner]
	delete(r.owner, owner)
	forget := had && r.drop(old)
	r.mu.Unlock()
	if forget {
		r.factory.Forget(old)
	}
}

// drop decrements the users of key and reports whether none are left. r.mu must be held.
func (r *Registry) drop(key string) bool {
	r.users[key]--
	if r.users[key] > 0 {
		return false
	}
	delete(r.users, key)
	return true
}
