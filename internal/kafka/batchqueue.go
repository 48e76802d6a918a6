package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// pending is one caller's share of a batch: what it asked (the queue's T), and its answer, given
// once through done.
type pending[T any] struct {
	ctx  context.Context
	req  T
	done chan struct{}
	err  error
}

// queue gathers the calls of one operation and sends them in batches: the first call of an idle
// queue arms a timer of window; when it fires, everything gathered goes in one send. While a send is
// in flight the calls that arrive wait for it and go together as soon as it returns, so a busy queue
// has one request in flight at a time. A queue holding max calls sends at once.
type queue[T any] struct {
	window time.Duration
	max    int
	clock  clock.WithDelayedExecution
	// key names what a call changes, for operations Kafka refuses twice in one request (a topic
	// created twice): a second call with the key of one already taken waits for the next batch. nil
	// for reads, which may repeat.
	key func(T) string
	// send runs one batch and sets each call's err (and the answer T points to).
	send func(batch []*pending[T])

	mu       sync.Mutex
	calls    []*pending[T]
	armed    bool
	inflight int
}

// do queues req and waits for its answer or for ctx to end; op names the call in the error then.
func (q *queue[T]) do(ctx context.Context, op string, req T) error {
	p := &pending[T]{ctx: ctx, req: req, done: make(chan struct{})}
	q.mu.Lock()
	q.calls = append(q.calls, p)
	var batch []*pending[T]
	switch {
	case len(q.calls) >= q.max:
		batch = q.take()
	case q.armed || q.inflight > 0:
		// The timer, or the return of the send in flight, takes it.
	default:
		q.armed = true
		q.clock.AfterFunc(q.window, q.fire)
	}
	q.mu.Unlock()
	if batch != nil {
		go q.run(batch)
	}
	select {
	case <-p.done:
		return p.err
	case <-ctx.Done():
		// The batch goes on for the others; this caller stops waiting, as it would alone.
		return NewError(op, KindOther, ctx.Err(), "")
	}
}

// queued is the number of calls waiting for a send.
func (q *queue[T]) queued() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.calls)
}

// take removes the next batch from the queue and counts it in flight: up to max calls, none whose
// caller has given up, each key once. q.mu must be held.
func (q *queue[T]) take() []*pending[T] {
	var batch, rest []*pending[T]
	var keys map[string]bool
	if q.key != nil {
		keys = map[string]bool{}
	}
	for _, p := range q.calls {
		if p.ctx.Err() != nil {
			// Its caller returned already: nobody reads the answer.
			continue
		}
		if len(batch) == q.max {
			rest = append(rest, p)
			continue
		}
		if keys != nil {
			k := q.key(p.req)
			if keys[k] {
				rest = append(rest, p)
				continue
			}
			keys[k] = true
		}
		batch = append(batch, p)
	}
	q.calls = rest
	if len(batch) > 0 {
		q.inflight++
	}
	return batch
}

// fire is the window's end. It runs under the fake clock's lock in tests, so it only starts the send.
func (q *queue[T]) fire() {
	q.mu.Lock()
	q.armed = false
	var batch []*pending[T]
	if q.inflight == 0 {
		batch = q.take()
	}
	q.mu.Unlock()
	if len(batch) > 0 {
		go q.run(batch)
	}
}

// sendSafely sends batch, turning a panic into an error for each caller: the send runs on a
// goroutine of the batcher's, where a panic would crash the manager (controller-runtime recovers
// only the reconciler's) and leave every caller waiting; unbatched, the caller's reconcile would
// have recovered it.
func (q *queue[T]) sendSafely(batch []*pending[T]) {
	defer func() {
		if r := recover(); r != nil {
			err := NewError("batched request", KindOther, fmt.Errorf("panic: %v", r), "")
			for _, p := range batch {
				p.err = err
			}
		}
	}()
	q.send(batch)
}

// run sends batch, then whatever gathered meanwhile, until the queue is empty or another send has
// it.
func (q *queue[T]) run(batch []*pending[T]) {
	for len(batch) > 0 {
		q.sendSafely(batch)
		sent := batch
		q.mu.Lock()
		q.inflight--
		batch = nil
		if q.inflight == 0 {
			// Those gathered meanwhile waited long enough; an armed timer then finds none.
			batch = q.take()
		}
		q.mu.Unlock()
		// Answered once the send no longer counts in flight, so that a caller's next call finds
		// the queue as its answer left it.
		for _, p := range sent {
			close(p.done)
		}
	}
}
