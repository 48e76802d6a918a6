package dispatcher

import (
	"context"
	"time"
)

// SetPollHook makes the poll loop call f at the start of every iteration (a test seam to stall it).
// Call it before Run.
func (e *Engine) SetPollHook(f func()) { e.pollHook = f }

// LosePartitions calls the engine's OnPartitionsLost callback, as franz-go does when the session
// is lost.
func (e *Engine) LosePartitions(lost map[string][]int32) { e.onLost(context.Background(), e.cl, lost) }

// AssignPartitions calls the engine's OnPartitionsAssigned callback.
func (e *Engine) AssignPartitions(assigned map[string][]int32) {
	e.onAssigned(context.Background(), e.cl, assigned)
}

// LastBeat is when, on the engine's clock, the poll loop last went round.
func (e *Engine) LastBeat() time.Time { return time.Unix(0, e.pollBeat.Load()) }

// RevokePartitions calls the engine's OnPartitionsRevoked callback, as franz-go does in a
// rebalance; it returns when the callback does (after up to drainTimeout).
func (e *Engine) RevokePartitions(revoked map[string][]int32) {
	e.onRevoked(context.Background(), e.cl, revoked)
}

// FetchError hands the engine a fetch error of a poll, as the poll loop does.
func (e *Engine) FetchError(topic string, partition int32, err error) {
	e.fetchError(topic, partition, err)
}
