package kafka

import (
	"context"
	"sync"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/lease"
)

// Registry hands out admin clients and remembers which connection each user (a resource, named
// "Kind/namespace/name") uses, so that the client of a connection nobody uses any more (after a
// Secret rotation changed its Key) is closed at once instead of lingering until the factory's idle
// sweep. It is safe for concurrent use.
//
// A user is remembered for RegistryLease after its last Admin: one that stops asking (its resource
// was deleted) is dropped by itself. Dropping a user that way closes nothing: its client, if nobody
// else uses it, goes with the factory's idle sweep, which never closes a client in use. A user that
// holds its client for longer than it asks (a replay running for hours) is held (Hold) until its
// Release.
type Registry struct {
	factory AdminFactory
	clock   clock.PassiveClock

	mu     sync.Mutex
	owner  map[string]string // user -> connection key
	users  map[string]int    // connection key -> number of users
	leases lease.Table[string]
	held   map[string]bool // users exempt from the lease until their Release
}

// RegistryLease is how long a Registry remembers a user after its last Admin.
const RegistryLease = lease.Min

// NewRegistry returns a Registry over f, on clk (the real clock when nil).
func NewRegistry(f AdminFactory, clk clock.PassiveClock) *Registry {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Registry{factory: f, clock: clk, owner: map[string]string{}, users: map[string]int{}}
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
	now := r.clock.Now()
	for _, gone := range r.leases.Expired(now) {
		if gone == owner {
			continue // back just in time
		}
		if r.held[gone] {
			r.leases.Renew(gone, now, RegistryLease)
			continue
		}
		if k, ok := r.owner[gone]; ok {
			delete(r.owner, gone)
			r.drop(k)
		}
	}
	r.leases.Renew(owner, now, RegistryLease)
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
	delete(r.held, owner)
	r.leases.Drop(owner)
	forget := had && r.drop(old)
	r.mu.Unlock()
	if forget {
		r.factory.Forget(old)
	}
}

// Hold keeps owner, a user already, past its lease until its Release.
func (r *Registry) Hold(owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.owner[owner]; !ok {
		return
	}
	if r.held == nil {
		r.held = map[string]bool{}
	}
	r.held[owner] = true
}

// Users is the number of users remembered.
func (r *Registry) Users() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.owner)
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
