package dispatcher

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retry"
)

// A write is a record on its way to a retry tier or to the dead letter topic; its item is settled
// by the write's acknowledgement (written), never before.
type write struct {
	it    *item
	rec   *kgo.Record
	f     *failure // the failure written; f.reason is the dead letter's reason
	toDLQ bool
	alone bool // written in a batch of its own, after its batch was rejected as too large
	// repark: the record written again to its tier, not yet due (repark.go); f then says so.
	repark bool
}

// toRetryTier writes the record to the tier of its next attempt (retryTier), or dead-letters it
// when no tier holds that attempt.
func (e *Engine) toRetryTier(it *item, f *failure, dec retry.Decision) {
	if it.attempt < 1 || it.attempt >= e.maxAttempts() {
		g := *f
		g.reason = headers.ReasonMaxRetriesExceeded
		e.deadLetter(it, &g, it.attempt)
		return
	}
	tier := e.retryTier(it.attempt+1, dec.Delay, dec.FromRetryAfter)
	e.write(&write{it: it, rec: it.retryRecord(e.tierNames[tier], e.pipelineID, f, dec.Due), f: f})
}

// deadLetter writes the record to the dead letter topic. attempts is the number of deliveries made.
func (e *Engine) deadLetter(it *item, f *failure, attempts int32) {
	e.write(&write{it: it, rec: it.deadLetterRecord(e.dlqTopic, e.group, e.pipelineID, attempts, f), f: f, toDLQ: true})
}

// write produces w.rec in a batch shared with other records; written handles the outcome.
func (e *Engine) write(w *write) {
	w.alone = false
	cl := e.cl
	if w.toDLQ {
		cl = e.dlq
	}
	cl.Produce(e.produceCtx, w.rec, func(_ *kgo.Record, err error) { e.written(w, err) })
}

// written is the one acknowledgement handler of both destinations. A batch rejected as too large
// is written again one record at a time, so that only a record too large itself fails, not the
// others of its batch. A retry that cannot be written is dead-lettered; a dead letter that cannot
// be written escalates (deadletter.go).
func (e *Engine) written(w *write, err error) {
	it := w.it
	where := wherePrefixP + w.rec.Topic
	if err == nil {
		e.kafkaOKAt(where)
		switch {
		case w.toDLQ:
			e.m.DeadLetter(w.f.reason)
			e.settle(it, fateDeadLettered, nil)
		case w.repark:
			e.settle(it, fateReparked, nil)
		default:
			e.settle(it, fateRetried, nil)
		}
		return
	}
	if e.produceCtx.Err() != nil {
		e.settle(it, fateAbandoned, nil)
		return
	}
	if w.toDLQ {
		e.m.DLQProduceErr.Inc()
	} else {
		e.m.RetryProduceErr.Inc()
	}
	e.kafkaFailed(where, err, true, "topic", w.rec.Topic)
	big := tooLarge(err)
	if big && !w.alone {
		e.writeAlone(w)
		return
	}
	if w.toDLQ {
		e.deadLetterFailed(w, err, big)
		return
	}
	e.log.Error("Writing to a retry tier failed; dead-lettering the record", "topic", w.rec.Topic,
		"originalTopic", it.view.Topic, "originalPartition", it.view.Partition, "originalOffset", it.view.Offset, "error", err)
	f := w.f
	g := *f
	g.reason = headers.ReasonUndeliverable
	g.errorType = headers.ErrorTypeRetryProduceFailed
	g.message = "writing to retry tier " + w.rec.Topic + " failed: " + err.Error() + " (last failure: " + f.errorType + ": " + f.message + ")"
	attempts := it.attempt // the delivery that just failed
	if w.repark {
		g.message = "writing to retry tier " + w.rec.Topic + " failed: " + err.Error() + " (" + f.message + ")"
		attempts-- // not delivered this time
	}
	e.deadLetter(it, &g, attempts)
}

// tooLarge reports whether a write failed because the broker took its batch for too large.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// writeAlone writes w.rec in a batch of its own, through a solo client (one such write at a time),
// to learn whether this record is the one too large.
func (e *Engine) writeAlone(w *write) {
	w.alone = true
	cl := e.solo
	if w.toDLQ {
		cl = e.dlqSolo
	}
	go func() {
		e.aloneMu.Lock()
		err := cl.ProduceSync(e.produceCtx, w.rec).FirstErr()
		e.aloneMu.Unlock()
		e.written(w, err)
	}()
}
