package dispatcher

import (
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/dispatcher/metrics"
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

// Values of item.dlqLevel: what the dead letter being written dropped.
const (
	dlqWhole = iota
	dlqNoValue
	dlqStripped
)

// deadLettered handles the outcome of a dead-letter write. alone says the record was written on
// its own (not in a batch shared with other records).
func (e *Engine) deadLettered(it *item, rec *kgo.Record, reason string, err error, alone bool) {
	if err == nil {
		e.unstick(it)
		e.m.DeadLetter(reason)
		e.finish(it, metrics.OutcomeDeadLettered)
		return
	}
	if e.produceCtx.Err() != nil {
		e.unstick(it)
		e.abandonItem(it)
		return
	}
	e.m.DLQProduceErr.Inc()
	big := tooLarge(err)
	if big && !alone {
		// The whole batch was rejected: write this record on its own to learn whether it is the one
		// too large.
		e.writeAlone(e.dlqSolo, rec, func(err error) { e.deadLettered(it, rec, reason, err, true) })
		return
	}
	it.dlqTries++
	log := e.log.With("topic", rec.Topic, "originalTopic", it.view.Topic, "originalPartition", it.view.Partition,
		"originalOffset", it.view.Offset, "error", err)
	switch {
	case big && it.dlqLevel == dlqWhole && rec.Value != nil:
		// The broker will never take it: keep the key, headers and context, drop the value.
		log.Error("A dead letter is too large for the dead letter topic; writing it without its value", "valueBytes", len(rec.Value))
		it.dlqLevel = dlqNoValue
		small := *rec
		small.Headers = append(slices.Clip(rec.Headers), hdr(headers.ValueOmitted, strconv.Itoa(len(rec.Value))))
		small.Value = nil
		e.produceDLQ(it, &small, reason)
		return
	case it.dlqLevel < dlqStripped && (big || it.dlqTries >= deadLetterTries):
		log.Error("Writing a dead letter failed; writing it stripped to its retryops headers, without key, value and user headers",
			"tries", it.dlqTries, "keyBytes", len(it.view.Key), "valueBytes", len(it.view.Value))
		it.dlqLevel = dlqStripped
		e.produceDLQ(it, it.stripped(rec), reason)
		return
	}
	wait := deadLetterRetryWait << min(it.dlqTries-1, 5)
	if it.dlqLevel == dlqStripped {
		wait = stuckRetryWait
		if !it.dlqStuck {
			log.Error("Writing a dead letter failed even stripped; its partition commits nothing past it and the dispatcher is not ready until it is written",
				"partition", it.rec.Partition, "offset", it.rec.Offset, "sourceTopic", it.rec.Topic, "retryEvery", wait)
			e.stick(it)
		} else {
			log.Warn("A stuck dead letter still cannot be written", "retryEvery", wait)
		}
	} else {
		log.Error("Writing a dead letter failed; retrying", "tries", it.dlqTries, "in", wait)
	}
	go func() {
		if !e.sleep(it.part.dlqCtx, wait) || it.part.goneFlag.Load() { // stopping, or the partition revoked
			e.unstick(it)
			e.abandonItem(it)
			return
		}
		e.produceDLQ(it, rec, reason)
	}()
}

// stripped is a dead letter reduced to its retryops.* headers, with the key's and value's sizes.
func (it *item) stripped(rec *kgo.Record) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+2)
	for _, h := range rec.Headers {
		if headers.IsOwned(h.Key) && h.Key != headers.ValueOmitted && h.Key != headers.KeyOmitted {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		hdr(headers.KeyOmitted, strconv.Itoa(len(it.view.Key))),
		hdr(headers.ValueOmitted, strconv.Itoa(len(it.view.Value))))
	return &kgo.Record{Topic: rec.Topic, Headers: hs}
}

// stick counts a dead letter as stuck: the engine is not ready while any is.
func (e *Engine) stick(it *item) {
	e.mu.Lock()
	it.dlqStuck = true
	it.part.stuck++
	n := e.stuck.Add(1)
	if e.waiters > 0 {
		e.cond.Broadcast() // a stop waiting for in-flight work no longer waits for this one
	}
	e.mu.Unlock()
	e.m.StuckDeadLetters.Set(float64(n))
	e.m.Ready.Set(0)
}

// unstick undoes stick, if it was done.
func (e *Engine) unstick(it *item) {
	e.mu.Lock()
	if !it.dlqStuck {
		e.mu.Unlock()
		return
	}
	it.dlqStuck = false
	it.part.stuck--
	n := e.stuck.Add(-1)
	e.mu.Unlock()
	e.m.StuckDeadLetters.Set(float64(n))
	if e.Ready() {
		e.m.Ready.Set(1)
	}
}
