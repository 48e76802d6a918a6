package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/retryops/retry-operator/sdk/circuitstate"
)

// Liveness and readiness.
//
// The poll loop beats (pollBeat, on the engine's clock) on every iteration, and goes round at
// least every pollBeatEvery of real time even when nothing is fetched or there is no room: its
// poll and its wait for room are bounded. The engine is not live when the loop has not beaten for
// pollStallBound, which leaves many iterations of slack over any legitimate wait.
//
// A worker marks the record it hands to the Handler (busy, with the start on the engine's clock);
// the engine is not live when a delivery has run for longer than attemptTimeout plus
// workerStallMargin: the handler ignores its context (the sink client of an HTTP sink, the
// function of library mode). Without an attemptTimeout a delivery has no bound and is not checked.
//
// Readiness is false, besides a stop and a stuck dead letter, once partitions were lost
// (OnPartitionsLost: the group session expired) and none is owned, until some are assigned again,
// and while Kafka refuses the consumer (kafkahealth.go).
const (
	pollBeatEvery     = time.Second
	pollStallFloor    = 30 * time.Second // 30 × pollBeatEvery, 60 × fetchMaxWait
	workerStallMargin = 30 * time.Second
)

// pollStallBound is how long the poll loop may go without beating before the engine is not live.
func (s *settings) pollStallBound() time.Duration {
	return max(pollStallFloor, s.drainTimeout+finalCommitMax+pollBeatEvery)
}

// beat records an iteration of the poll loop.
func (e *Engine) beat() { e.pollBeat.Store(e.clock.Now().UnixNano()) }

// pollBounded is PollFetches returning after pollBeatEvery at the latest, so the loop beats
// while idle. A poll cut short returns no records and loses nothing buffered.
func (e *Engine) pollBounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, pollBeatEvery)
}

// busyStart marks the start of a delivery by a worker; busyEnd its end.
func (e *Engine) busyStart(it *item, at time.Time) {
	e.busyMu.Lock()
	e.busy[it] = at
	e.busyMu.Unlock()
}

func (e *Engine) busyEnd(it *item) {
	e.busyMu.Lock()
	delete(e.busy, it)
	e.busyMu.Unlock()
}

// Live reports whether the engine is healthy: Run has not failed and, while it runs, the poll loop
// beat within pollStallBound() and no delivery has run past attemptTimeout plus workerStallMargin.
func (e *Engine) Live() bool {
	if e.runErr.Load() != nil {
		return false
	}
	if !e.started.Load() || e.stopped.Load() {
		return true
	}
	now := e.clock.Now()
	if last := e.pollBeat.Load(); last != 0 && now.Sub(time.Unix(0, last)) > e.pollStallBound() {
		return false
	}
	if e.attemptTimeout <= 0 {
		return true
	}
	bound := e.attemptTimeout + workerStallMargin
	e.busyMu.Lock()
	defer e.busyMu.Unlock()
	for _, at := range e.busy {
		if now.Sub(at) > bound {
			return false
		}
	}
	return true
}

// Ready reports whether the engine joined its group, is not stopping, has no stuck dead letter
// (deadletter.go), does not stand without partitions after losing them, and Kafka does not refuse
// it (kafkahealth.go).
func (e *Engine) Ready() bool {
	return e.NotReadyReason() == ""
}

// NotReadyReason says why the engine is not ready, "" when it is (the body of /readyz).
func (e *Engine) NotReadyReason() string {
	if p := e.KafkaProblem(); p != nil {
		what := "Kafka refuses an operation (authorization)"
		switch p.Reason {
		case circuitstate.KafkaAuthentication:
			what = "Kafka refuses the credentials (authentication)"
		case circuitstate.KafkaTLS:
			what = "the TLS connection to Kafka fails"
		}
		return fmt.Sprintf("%s since %s: %s", what, p.Since.UTC().Format(time.RFC3339), p.Message)
	}
	switch {
	case !e.started.Load():
		return "not started"
	case e.stopped.Load():
		return "stopping"
	case !e.joined.Load():
		return "not yet joined the consumer group"
	case e.stuck.Load() > 0:
		return fmt.Sprintf("%d dead letters cannot be written", e.stuck.Load())
	case e.lostAll.Load():
		return "every partition was lost (the group session expired)"
	}
	return ""
}

// own counts assigned partitions and those given up (revoked or lost); after a loss that leaves
// none, the engine is not ready until partitions are assigned again.
func (e *Engine) own(tps map[string][]int32, add, lost bool) {
	e.ownedMu.Lock()
	defer e.ownedMu.Unlock()
	for t, ps := range tps {
		for _, p := range ps {
			if add {
				e.owned[tpKey{t, p}] = struct{}{}
			} else {
				delete(e.owned, tpKey{t, p})
			}
		}
	}
	switch {
	case add && len(e.owned) > 0:
		e.lostAll.Store(false)
	case lost && len(e.owned) == 0:
		e.lostAll.Store(true)
	}
}
