package kafka

import (
	"context"
	"sync"
)

// BatchingFactory is a ClientFactory whose admin clients batch (Batching): one per connection key,
// so that every resource on a connection shares its batches. Record scans and produces go straight
// to the factory it wraps.
type BatchingFactory struct {
	ClientFactory
	opts BatchOptions

	mu       sync.Mutex
	batchers map[string]*Batching
}

// NewBatchingFactory wraps f. A factory whose clients cannot batch (not a BatchAdmin) hands them out
// as they are.
func NewBatchingFactory(f ClientFactory, o BatchOptions) *BatchingFactory {
	return &BatchingFactory{ClientFactory: f, opts: o, batchers: map[string]*Batching{}}
}

// Admin implements AdminFactory: the batching client of conn's key, over the wrapped factory's
// client of conn (asked every time, so that a client its idle sweep closed is replaced).
func (f *BatchingFactory) Admin(ctx context.Context, conn Connection) (Admin, error) {
	a, err := f.ClientFactory.Admin(ctx, conn)
	if err != nil {
		return nil, err
	}
	ba, ok := a.(BatchAdmin)
	if !ok {
		return a, nil
	}
	key := conn.Key()
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.batchers[key]
	if !ok {
		b = NewBatching(ba, f.opts)
		f.batchers[key] = b
		return b, nil
	}
	b.setAdmin(ba)
	return b, nil
}

// Forget implements AdminFactory: it drops the batching client of key too.
func (f *BatchingFactory) Forget(key string) bool {
	f.mu.Lock()
	delete(f.batchers, key)
	f.mu.Unlock()
	return f.ClientFactory.Forget(key)
}

// Start runs the wrapped factory's Start, if it has one (the franz-go factory sweeps idle clients
// and closes them all when ctx ends), so that the manager still runs it; else it waits for ctx.
func (f *BatchingFactory) Start(ctx context.Context) error {
	if r, ok := f.ClientFactory.(interface{ Start(context.Context) error }); ok {
		return r.Start(ctx)
	}
	<-ctx.Done()
	return nil
}
