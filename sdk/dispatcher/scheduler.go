package dispatcher

import (
	"context"
	"slices"
	"time"

	"github.com/retryops/retry-operator/sdk/headers"
)

// Fetch tuning. A resumed partition is fetched only once the fetch under way returns, which takes
// up to fetchMaxWait when no data arrives; so a paused retry-tier partition is resumed resumeLead
// before a record in or behind its look-ahead window may fall due.
const (
	fetchMaxWait = 500 * time.Millisecond
	resumeLead   = 2 * fetchMaxWait
)

// scheduleLocked starts every delivery that may start now, recomputes which partitions should be
// paused, and arms the timer for the next due time.
func (e *Engine) scheduleLocked() { e.scheduleTo(nil) }

// scheduleTo is scheduleLocked handing the first record it dispatches to *next when next is not
// nil (a worker that settled a record takes it instead of waking another).
func (e *Engine) scheduleTo(next **item) {
	if e.stopping {
		e.flushBatchLocked()
		return
	}
	now := e.clock.Now()
	var wake time.Time
	sinkBlocked, breakerOpen := false, false
	if e.breaker != nil {
		if until, open := e.breaker.OpenUntil(); open {
			sinkBlocked, breakerOpen = true, true
			wake = until
		}
	}
	n := len(e.order)
	if n > 0 {
		e.rr = (e.rr + 1) % n
	}
	for k := 0; k < n && e.active < e.maxInFlight; k++ {
		ps := e.order[(e.rr+k)%n]
		if ps.revoking {
			if ps.batched > 0 {
				e.flushBatchLocked() // a revocation waits for its records: no maxWait on top
			}
			continue
		}
		for it := ps.peek(); it != nil && e.canStartLocked(ps); it = ps.peek() {
			if it.pre == nil {
				if !it.due.IsZero() && it.due.After(now) {
					wake = earliest(wake, it.due) // the partition's next record to fall due
					break
				}
				if e.pol.Expired(it.srcTime, now) {
					it.pre = &failure{reason: headers.ReasonDeadlineExceeded, errorType: headers.ErrorTypeDeadlineExceeded,
						message: "the record is past its deadline (" + e.pol.Policy().Deadline.String() + " after " + headers.FormatTime(it.srcTime) + ")"}
				} else {
					if sinkBlocked {
						break
					}
					if e.batchMax > 0 && e.ordered && ps.tier == 0 && ps.batched > 0 && e.pendBytes+e.batchRecordSize(it) > e.batchBytes {
						// Past maxBytes, it would start a second batch of its partition while the
						// first is in flight: it waits for that one to finish.
						e.flushBatchLocked()
						break
					}
					if e.breaker != nil {
						p, ok := e.breaker.Admit()
						if !ok {
							sinkBlocked = true
							break
						}
						it.allowed, it.permit = true, p
					}
				}
			}
			if it.pre != nil && ps.batched > 0 && e.ordered && ps.tier == 0 {
				e.flushBatchLocked() // it goes alone, after the records of its partition before it
				break
			}
			ps.start()
			ps.noteStart(it.rec.Offset)
			e.active++
			e.slots++
			e.buffered--
			if ps.tier == 0 {
				e.srcQueued--
			}
			if e.batchMax > 0 && it.pre == nil {
				e.batchAddLocked(it, now)
			} else {
				e.dispatchLocked(it, next)
			}
		}
	}
	for _, ps := range e.order {
		if ps.tier > 0 {
			if at := e.reparkLocked(ps, now, next); !at.IsZero() {
				wake = earliest(wake, at)
			}
		}
	}
	wake = e.batchDueLocked(now, wake)

	e.holdSourceLocked()
	changed := false
	ready := 0
	for _, ps := range e.order {
		want, resumeAt := e.wantPausedLocked(ps, now, breakerOpen)
		if !resumeAt.IsZero() {
			wake = earliest(wake, resumeAt)
		}
		if want != ps.paused {
			ps.paused = want
			changed = true
			if want {
				e.pausedCnt++
			} else {
				e.pausedCnt--
			}
		}
		if !ps.paused && ps.tier == 0 {
			ready += ps.queued()
		}
	}
	if changed {
		kick(e.pauseKick)
	}
	e.ready = ready
	if ready < e.maxBuffered {
		kick(e.roomKick)
	}
	e.armTimerLocked(wake)
	e.gaugesLocked()
}

// canStartLocked reports whether the next record of partition ps may start: fewer than
// maxInFlight deliveries under way and, for the source topic, fewer than maxUncommitted finished
// records waiting for their commit (a source partition starts its records in offset order, so the
// record holding back its commits is always started before them). A retry tier's records start in
// due order, so their finished records are bounded by the tier's look-ahead window instead.
func (e *Engine) canStartLocked(ps *partState) bool {
	switch {
	case e.active >= e.maxInFlight:
		return false
	case ps.tier > 0:
		return true
	case e.ordered && ps.inFlight > ps.batched:
		return false // one at a time, or one batch at a time, its records consecutive
	}
	return e.srcDone < e.maxUncommitted
}

func (e *Engine) gaugesLocked() {
	e.m.InFlight.Set(float64(e.active))
	e.m.Uncommitted.Set(float64(e.slots - e.active))
	e.m.Buffered.Set(float64(e.buffered))
	e.m.PausedPartitions.Set(float64(e.pausedCnt))
}

// holdSourceLocked decides whether the source partitions are paused for back-pressure: with retry
// tiers to consume, from when the source's queues hold maxBuffered records until they hold half as
// many. Not polling at all (waitRoom) would also stop fetching the tiers, so that a retry falls due
// behind the whole source backlog; paused source partitions leave polling to the tiers. (Without
// tiers, not polling keeps franz-go's buffered fetch, which pausing would drop.)
func (e *Engine) holdSourceLocked() {
	if len(e.topicTier) < 2 {
		return
	}
	switch {
	case e.srcQueued >= e.maxBuffered:
		e.srcHold = true
	case e.srcQueued <= e.maxBuffered/2:
		e.srcHold = false
	}
}

// wantPausedLocked says whether a partition's fetching should be paused, and when to look again
// (zero: on the next event). Every partition pauses while the breaker is open; a source partition
// while the source is held for back-pressure (holdSourceLocked). A retry tier also
// pauses while its look-ahead window is full, and while nothing it holds nor anything behind it can
// fall due within resumeLead: no retry behind the last one fetched is due before that retry's
// timestamp plus the tier's shortest delay. A Replay's record, due when written, does not count
// (partState.lastTime): a rate-limited Replay's next records are fetched as they are written, but
// those written behind a waiting retry wait, in a paused partition, until that retry is due.
func (e *Engine) wantPausedLocked(ps *partState, now time.Time, breakerOpen bool) (bool, time.Time) {
	if ps.revoking || ps.gone {
		return false, time.Time{}
	}
	if breakerOpen {
		return true, time.Time{}
	}
	if ps.tier == 0 {
		return e.srcHold, time.Time{}
	}
	if records, bytes := ps.window(); records >= e.lookAheadRecords || bytes >= e.lookAheadBytes {
		return true, time.Time{} // resumed as its records finish
	}
	if ps.lastTime.IsZero() {
		return false, time.Time{} // nothing fetched yet
	}
	soonest := ps.lastTime.Add(e.tierEarliest[ps.tier])
	if it := ps.peek(); it != nil {
		soonest = earliest(soonest, it.dueKey())
	}
	if resume := soonest.Add(-resumeLead); resume.After(now) {
		return true, resume
	}
	return false, time.Time{}
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// armTimerLocked makes sure scheduling runs again at `at` (zero: no need): timerLoop sets its
// timer to the earliest time armed.
func (e *Engine) armTimerLocked(at time.Time) {
	if at.IsZero() {
		return
	}
	if !e.timerAt.IsZero() && !e.timerAt.After(at) {
		return // an earlier (or equal) wake-up is already armed
	}
	e.timerAt = at
	kick(e.timerKick)
}

// timerLoop runs the scheduler at the time armTimerLocked asked for, on the engine's clock.
func (e *Engine) timerLoop(ctx context.Context) {
	timer := e.stoppedTimer()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			e.onTimer()
		case <-e.timerKick:
			e.mu.Lock()
			at := e.timerAt
			e.mu.Unlock()
			if at.IsZero() {
				continue
			}
			stopTimer(timer)
			if d := at.Sub(e.clock.Now()); d > 0 {
				timer.Reset(d)
				if e.clock.Now().Before(at) {
					continue
				}
				// The clock passed `at` while the timer was being set (a fake clock stepped).
			}
			e.onTimer()
		}
	}
}

func (e *Engine) onTimer() {
	e.mu.Lock()
	e.timerAt = time.Time{}
	e.scheduleLocked()
	e.mu.Unlock()
}

// kick wakes the loop waiting on ch, unless a wake-up is pending already.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pauseLoop reconciles franz-go's paused partitions with the desired state.
func (e *Engine) pauseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.pauseKick:
		}
		want := map[string][]int32{}
		e.mu.Lock()
		for _, ps := range e.order {
			if ps.paused {
				want[ps.topic] = append(want[ps.topic], ps.partition)
			}
		}
		e.mu.Unlock()
		current := e.cl.PauseFetchPartitions(nil)
		toPause, toResume := diffPartitions(want, current), diffPartitions(current, want)
		if len(toPause) > 0 {
			e.cl.PauseFetchPartitions(toPause)
		}
		if len(toResume) > 0 {
			e.cl.ResumeFetchPartitions(toResume)
		}
	}
}

// diffPartitions returns the partitions of a that are not in b.
func diffPartitions(a, b map[string][]int32) map[string][]int32 {
	var out map[string][]int32
	for t, ps := range a {
		for _, p := range ps {
			if slices.Contains(b[t], p) {
				continue
			}
			if out == nil {
				out = map[string][]int32{}
			}
			out[t] = append(out[t], p)
		}
	}
	return out
}
