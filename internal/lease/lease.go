// Package lease keeps what the operator remembers about resources from outliving them. A Table
// records, for each key (a resource's name in a cache, a member of a batched read), until when it
// is held: every use renews the key's lease, and a key not used within its lease expires. A
// resource that is deleted stops using its keys, so what it left behind goes by itself and the
// delete path forgets nothing by hand; a resource that is still there renews its keys on each of
// its reconciles, which come at least once per resync interval, so a lease of a few intervals
// (For) never expires under it.
//
// A Table is not safe for concurrent use: it lives inside the structure whose keys it leases,
// under that structure's lock. Time is passed in, never read.
package lease

import "time"

// Min is the shortest lease: a key lives at least this long unused.
const Min = 15 * time.Minute

// Max is the longest lease: what a deleted resource left goes within a day, however long the
// interval its author set. A resource refreshed less often than every Max/3 may find its keys gone
// and start them afresh (a tally counted again, say); it is refreshed that rarely.
const Max = 24 * time.Hour

// For is the lease of a key used every interval: three intervals, at least Min (so that a
// reconcile that comes late, after an error's backoff or in a busy work queue, never finds its key
// gone) and at most Max.
func For(interval time.Duration) time.Duration {
	if interval > Max/3 {
		return Max
	}
	return max(Min, 3*interval)
}

// Table is the leases of keys of type K. The zero value is empty and ready to use.
type Table[K comparable] struct {
	until   map[K]time.Time
	sweptAt time.Time
}

// Renew holds k until now plus d (within Min and Max), or longer if it was held longer already.
func (t *Table[K]) Renew(k K, now time.Time, d time.Duration) {
	if t.until == nil {
		t.until = map[K]time.Time{}
		t.sweptAt = now
	}
	if u := now.Add(min(max(d, Min), Max)); u.After(t.until[k]) {
		t.until[k] = u
	}
}

// Holds reports whether k is held at now.
func (t *Table[K]) Holds(k K, now time.Time) bool {
	u, ok := t.until[k]
	return ok && !now.After(u)
}

// Drop ends k's lease.
func (t *Table[K]) Drop(k K) { delete(t.until, k) }

// Expired removes the keys whose lease ended before now and returns them. It looks at most once per
// Min (and returns nil in between), so that calling it on every use costs nothing: a key thus
// lives at most its lease plus Min unused.
func (t *Table[K]) Expired(now time.Time) []K {
	if len(t.until) == 0 || now.Sub(t.sweptAt) < Min {
		return nil
	}
	t.sweptAt = now
	var gone []K
	for k, u := range t.until {
		if now.After(u) {
			gone = append(gone, k)
			delete(t.until, k)
		}
	}
	return gone
}

// Len is the number of keys held, expired ones not swept yet included.
func (t *Table[K]) Len() int { return len(t.until) }
