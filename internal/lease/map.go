package lease

import (
	"sync"
	"time"
)

// Map is a map whose entries are leased: reading an entry (Get, Update) or writing it (Put)
// renews its lease, and an entry unused past its lease goes. It is safe for concurrent use; the
// zero value is empty and ready to use.
type Map[K comparable, V any] struct {
	mu     sync.Mutex
	m      map[K]V
	leases Table[K]
}

// Get returns the value of k and renews it for d from now.
func (m *Map[K, V]) Get(k K, now time.Time, d time.Duration) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(now)
	v, ok := m.m[k]
	if ok {
		m.leases.Renew(k, now, d)
	}
	return v, ok
}

// Renew renews k, if it is there, for d from now.
func (m *Map[K, V]) Renew(k K, now time.Time, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.m[k]; ok {
		m.leases.Renew(k, now, d)
	}
}

// Put sets the value of k, held for d from now.
func (m *Map[K, V]) Put(k K, v V, now time.Time, d time.Duration) {
	m.Update(k, now, d, func(V, bool) V { return v })
}

// Update sets the value of k to what f makes of its value (ok false: none), held for d from now; f
// runs under the map's lock.
func (m *Map[K, V]) Update(k K, now time.Time, d time.Duration, f func(v V, ok bool) V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(now)
	if m.m == nil {
		m.m = map[K]V{}
	}
	v, ok := m.m[k]
	m.m[k] = f(v, ok)
	m.leases.Renew(k, now, d)
}

// Len is the number of entries, expired ones not swept yet included.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// sweep drops the entries whose lease expired; m.mu is held.
func (m *Map[K, V]) sweep(now time.Time) {
	for _, k := range m.leases.Expired(now) {
		delete(m.m, k)
	}
}
