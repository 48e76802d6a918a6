package dispatcher

import (
	"context"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Bounds of the last steps of a stop (after drainTimeout) and of the commit of a revocation. Every
// wait of a stop is bounded, so a stop ends at most drainTimeout + ShutdownAfterDrain after it began
// (the operator's terminationGracePeriodSeconds adds a margin above that; see internal/render).
const (
	abandonWait    = 2 * time.Second // for abandoned deliveries and writes to let go of their slots
	finalCommitMax = 4 * time.Second // for the commit of revoked partitions and the final commit, the commit lock included
	leaveMax       = 3 * time.Second // for leaving the group and closing the clients
	workersMax     = time.Second     // for the workers to return

	// ShutdownAfterDrain bounds what a stop takes after its drain timeout.
	ShutdownAfterDrain = abandonWait + finalCommitMax + leaveMax + workersMax
)

// onAssigned makes every assigned partition known to the engine at once, not at its first fetched
// record: a fetch session (KIP-227) returns a partition only when it has something new, so a
// retry tier no record has reached yet would otherwise escape the pauses (an open breaker's).
func (e *Engine) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	e.own(assigned, true, false)
	if len(assigned) > 0 {
		e.mu.Lock()
		for t, ps := range assigned {
			for _, p := range ps {
				e.partLocked(t, p)
			}
		}
		e.scheduleLocked()
		e.mu.Unlock()
	}
	e.kafkaOK(func(w string, _ *kafkaProblem) bool {
		if w == whereGroup {
			return true
		}
		t, ok := strings.CutPrefix(w, wherePrefixF)
		_, assignedT := assigned[t]
		return ok && assignedT
	})
	if !e.joined.Swap(true) {
		e.m.Ready.Set(1)
		e.log.Info("Joined the consumer group")
	}
	if len(assigned) > 0 {
		e.log.Info("Partitions assigned", "partitions", assigned)
	}
}

// onRevoked stops dispatching from the revoked partitions, waits up to drainTimeout for their
// deliveries, commits what finished and forgets them.
func (e *Engine) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if len(revoked) == 0 {
		return
	}
	defer e.own(revoked, false, false)
	e.mu.Lock()
	parts := e.partsLocked(revoked)
	for _, ps := range parts {
		ps.revoking = true
	}
	e.flushBatchLocked() // the drain waits for the records of the batch being filled
	e.waitLocked(func() bool {
		for _, ps := range parts {
			if ps.inFlight > ps.stuck { // a stuck dead letter will not finish by waiting
				return false
			}
		}
		return true
	}, e.drainTimeout)
	e.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, finalCommitMax)
	_, err := e.commitParts(cctx, parts)
	cancel()
	if err != nil {
		e.log.Warn("Committing revoked partitions failed", "error", err)
	}
	e.forget(parts)
	e.log.Info("Partitions revoked", "partitions", revoked)
}

// onLost forgets partitions that are no longer ours without committing.
func (e *Engine) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	e.own(lost, false, true)
	if len(lost) == 0 {
		return
	}
	e.mu.Lock()
	parts := e.partsLocked(lost)
	e.mu.Unlock()
	e.forget(parts)
	e.log.Warn("Partitions lost", "partitions", lost)
}

func (e *Engine) partsLocked(tps map[string][]int32) []*partState {
	var parts []*partState
	for t, ps := range tps {
		for _, p := range ps {
			if s := e.parts[tpKey{t, p}]; s != nil {
				parts = append(parts, s)
			}
		}
	}
	return parts
}

// forget drops partitions: their unfinished records are abandoned (redelivered by the next owner).
func (e *Engine) forget(parts []*partState) {
	e.mu.Lock()
	for _, ps := range parts {
		if ps.gone {
			continue
		}
		ps.goneFlag.Store(true)
		if ps.startedTo > 0 {
			e.startedTo[ps.tpKey] = ps.startedTo
		}
		ps.cancel() // deliveries still under way are abandoned, and dead-letter retries stop
		released, inFlight, dropped := ps.revoke()
		e.slots -= released
		e.active -= inFlight // their calls may still run; they no longer hold a slot
		if ps.tier == 0 {
			e.srcDone -= released - inFlight
		}
		e.buffered -= dropped
		if ps.tier == 0 {
			e.srcQueued -= dropped
		}
		if ps.paused {
			ps.paused = false
			e.pausedCnt--
		}
		delete(e.parts, ps.tpKey)
		e.m.DeleteLag(ps.topic, ps.partition)
	}
	kept := e.order[:0]
	for _, ps := range e.order {
		if !ps.gone {
			kept = append(kept, ps)
		}
	}
	clear(e.order[len(kept):])
	e.order = kept
	e.scheduleLocked()
	e.gaugesLocked()
	e.mu.Unlock()
	kick(e.pauseKick)
}

// waitLocked waits (e.mu held) until done() or the timeout elapses on the engine's clock; it
// reports done().
func (e *Engine) waitLocked(done func() bool, timeout time.Duration) bool {
	if done() {
		return true
	}
	expired := false
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if e.sleep(ctx, timeout) {
			e.mu.Lock()
			expired = true
			e.cond.Broadcast()
			e.mu.Unlock()
		}
	}()
	e.waiters++
	defer func() { e.waiters-- }()
	for !done() && !expired {
		e.cond.Wait()
	}
	return done()
}

// shutdown stops dispatching, drains in-flight work for up to drainTimeout, abandons the rest,
// commits what finished and leaves the group.
func (e *Engine) shutdown() {
	e.stopped.Store(true)
	e.m.Ready.Set(0)
	e.mu.Lock()
	e.stopping = true
	e.flushBatchLocked()
	inflight := e.active
	// A stuck dead letter will not finish by waiting: it is abandoned below.
	drained := e.waitLocked(func() bool { return e.active <= int(e.stuck.Load()) }, e.drainTimeout)
	left := e.active
	e.mu.Unlock()
	if !drained {
		e.log.Warn("Abandoning in-flight deliveries after the drain timeout; they will be delivered again", "inFlight", left, "drainTimeout", e.drainTimeout)
	}
	// Abandon whatever is left: deliveries get their context cancelled, pending writes fail.
	e.deliverCancel()
	e.produceCancel()
	e.mu.Lock()
	e.waitLocked(func() bool { return e.active == 0 }, abandonWait)
	e.mu.Unlock()

	cctx, cancel := context.WithTimeout(context.Background(), finalCommitMax)
	if _, err := e.commitParts(cctx, nil); err != nil {
		e.log.Error("Final commit failed; the uncommitted records will be delivered again", "error", err)
	}
	cancel()
	e.mu.Lock()
	parts := append([]*partState(nil), e.order...)
	e.mu.Unlock()
	e.forget(parts)
	e.log.Info("Stopped consuming", "drainedInFlight", inflight-left, "abandoned", left)

	// Leaving the group is a request to the broker: bounded, the clients are closed in the
	// background past it.
	if !e.within(leaveMax, e.closeClients) {
		e.log.Warn("Leaving the consumer group took too long; the group coordinator expires the membership after the session timeout", "waited", leaveMax)
	}
	e.mu.Lock()
	close(e.work)
	e.mu.Unlock()
	// Workers stuck in a handler that ignores its context are left behind rather than waited for.
	if !e.within(workersMax, e.workers.Wait) {
		e.log.Warn("Some deliveries did not return after their context was cancelled")
	}
}

// within runs f and waits for it up to d on the engine's clock (f runs on in the background past
// that); it reports whether f returned in time.
func (e *Engine) within(d time.Duration, f func()) bool {
	returned, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { f(); cancel() }()
	return !e.sleep(returned, d)
}
