package dispatcher

// fate is what became of a record. deliver.go decides it, produce.go writes what it needs written,
// and settle alone makes it take effect, as franz-go's Record.Ack does for each of its fates.
type fate uint8

const (
	fateUnsettled    fate = iota // queued, in delivery, or being written
	fateDelivered                // the handler succeeded
	fateDropped                  // the policy dropped it
	fateRetried                  // written to a retry tier
	fateDeadLettered             // written to the dead letter topic
	fateReparked                 // written again to the tail of its tier, not yet due (repark.go)
	fateAbandoned                // given up in a stop or a revocation: never committed
)

// finished says the record's offset may be committed.
func (f fate) finished() bool { return f >= fateDelivered && f <= fateReparked }

// settle makes a record's fate take effect: it counts the outcome, undoes a stuck dead letter's
// count, moves its partition's commit point (or, abandoned, only releases its slot), starts the
// deliveries that may start, and wakes the committer and a waiting stop. It is the only caller of
// the tracker's finish and abandon. From a worker, next is where the first record dispatched goes,
// for that worker to deliver without waking another; nil elsewhere.
func (e *Engine) settle(it *item, f fate, next **item) {
	switch f {
	case fateDelivered:
		e.m.Success.Inc()
	case fateRetried:
		e.m.Retried.Inc()
	case fateDeadLettered:
		e.m.DeadLettered.Inc()
	case fateDropped:
		e.m.Dropped.Inc()
	case fateReparked:
		e.m.Reparked.Inc()
	}
	e.mu.Lock()
	unstuck, stuck := false, int32(0)
	if it.dlq.level == dlqStuck {
		it.dlq.level = dlqStripped
		it.part.stuck--
		unstuck, stuck = true, e.stuck.Add(-1)
	}
	wake := false
	if f == fateAbandoned {
		if it.part.abandon(it) { // else the revocation released it
			e.slots--
			e.active--
		}
		e.scheduleTo(next)
		e.gaugesLocked()
	} else {
		wake = e.finishLocked(it, f, next)
	}
	if e.waiters > 0 {
		e.cond.Broadcast()
	}
	e.mu.Unlock()
	if unstuck {
		e.m.StuckDeadLetters.Set(float64(stuck))
		if e.Ready() {
			e.m.Ready.Set(1)
		}
	}
	if wake {
		kick(e.commitKick)
	}
}

// finishLocked finishes a record in its partition and schedules; it reports whether the committer
// must be woken: once per commit, or once more when the finished records press on maxUncommitted.
func (e *Engine) finishLocked(it *item, f fate, next **item) (wake bool) {
	advanced, live := it.part.finish(it, f)
	if live { // else the revocation released it
		e.active--
		stale := 0
		if !advanced {
			stale = it.part.releaseStale()
			e.slots -= stale
		}
		if it.part.tier == 0 {
			e.srcDone += 1 - stale
		}
	}
	e.scheduleTo(next)
	if !advanced {
		return false
	}
	switch {
	case !e.commitPending:
		e.commitPending = true
		return true
	case !e.pressureKicked && e.pressureLocked():
		e.pressureKicked = true
		return true
	}
	return false
}
