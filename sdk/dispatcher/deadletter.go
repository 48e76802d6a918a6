package dispatcher

import (
	"time"
)

// A dead-letter write that fails is tried deadLetterTries times in all, waiting deadLetterRetryWait
// after the first failure and twice as long after each next one. Then, or at once when the topic
// rejects the record as too large, the record is written stripped: without key, value and user
// headers, keeping its retryops.* headers (coordinates, reason, error type and bounded message).
// When even that fails the dead letter is stuck: logged, counted (metrics.StuckDeadLetters), the
// engine not ready, its partition committing nothing past it, and the stripped write tried again
// every stuckRetryWait. A stop or a revocation does not wait the drain timeout for it; it is
// abandoned (uncommitted) at once on a stop, and at its next try once its partition is revoked.
const (
	deadLetterTries     = 3
	deadLetterRetryWait = time.Second
	stuckRetryWait      = 30 * time.Second
)

// dlqLevel is what the dead letter being written gave up, in the order of escalation.
type dlqLevel uint8

const (
	dlqWhole    dlqLevel = iota // the whole record
	dlqNoValue                  // without its value (noValueRecord)
	dlqStripped                 // its retryops.* headers only (strippedRecord)
	dlqStuck                    // stripped, and that failed too: counted in Engine.stuck
)

// dlqState is how far the writing of one dead letter got.
type dlqState struct {
	tries int // failed writes
	level dlqLevel
}

// escalate is the state after a failed dead-letter write, and the wait before the next write: 0
// when the next write is at once, at the new level (no value, or stripped). big says the broker
// rejected the record as too large; hasValue that the record written had a value.
func escalate(s dlqState, big, hasValue bool) (dlqState, time.Duration) {
	s.tries++
	switch {
	case big && s.level == dlqWhole && hasValue: // the broker will never take it with its value
		s.level = dlqNoValue
		return s, 0
	case s.level < dlqStripped && (big || s.tries >= deadLetterTries):
		s.level = dlqStripped
		return s, 0
	case s.level >= dlqStripped:
		s.level = dlqStuck
		return s, stuckRetryWait
	}
	return s, deadLetterRetryWait << min(s.tries-1, 5)
}

// deadLetterFailed acts on a failed dead-letter write: it writes the record without its value or
// stripped, or writes it again after a wait, counting it stuck once even the stripped write fails.
func (e *Engine) deadLetterFailed(w *write, err error, big bool) {
	it := w.it
	prev := it.dlq.level
	next, wait := escalate(it.dlq, big, w.rec.Value != nil)
	it.dlq = next
	log := e.log.With("topic", w.rec.Topic, "originalTopic", it.view.Topic, "originalPartition", it.view.Partition,
		"originalOffset", it.view.Offset, "error", err)
	switch {
	case next.level == dlqNoValue && prev == dlqWhole:
		log.Error("A dead letter is too large for the dead letter topic; writing it without its value", "valueBytes", len(w.rec.Value))
		w.rec = noValueRecord(w.rec)
		e.write(w)
		return
	case next.level == dlqStripped && prev < dlqStripped:
		log.Error("Writing a dead letter failed; writing it stripped to its retryops headers, without key, value and user headers",
			"tries", next.tries, "keyBytes", len(it.view.Key), "valueBytes", len(it.view.Value))
		w.rec = it.strippedRecord(w.rec)
		e.write(w)
		return
	case next.level == dlqStuck && prev != dlqStuck:
		log.Error("Writing a dead letter failed even stripped; its partition commits nothing past it and the dispatcher is not ready until it is written",
			"partition", it.rec.Partition, "offset", it.rec.Offset, "sourceTopic", it.rec.Topic, "retryEvery", wait)
		e.stick(it)
	case next.level == dlqStuck:
		log.Warn("A stuck dead letter still cannot be written", "retryEvery", wait)
	default:
		log.Error("Writing a dead letter failed; retrying", "tries", next.tries, "in", wait)
	}
	go func() {
		if !e.sleep(it.part.dlqCtx, wait) || it.part.goneFlag.Load() { // stopping, or the partition revoked
			e.settle(it, fateAbandoned, nil)
			return
		}
		e.write(w)
	}()
}

// stick counts a dead letter as stuck: the engine is not ready while any is. settle undoes it.
func (e *Engine) stick(it *item) {
	e.mu.Lock()
	it.part.stuck++
	n := e.stuck.Add(1)
	if e.waiters > 0 {
		e.cond.Broadcast() // a stop waiting for in-flight work no longer waits for this one
	}
	e.mu.Unlock()
	e.m.StuckDeadLetters.Set(float64(n))
	e.m.Ready.Set(0)
}
