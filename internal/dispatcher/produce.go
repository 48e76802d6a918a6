package dispatcher

import (
	"errors"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/dispatcher/metrics"
	"github.com/retryops/retry-operator/internal/retry"
)

// retry writes the record to the tier of its next attempt (retryTier); it finishes once
// acknowledged.
func (e *Engine) retry(it *item, f *failure, dec retry.Decision) {
	if it.attempt < 1 || it.attempt >= e.maxAttempts() { // no tier holds the next attempt
		g := *f
		g.reason = headers.ReasonMaxRetriesExceeded
		e.deadLetter(it, &g, it.attempt)
		return
	}
	tier := e.retryTier(it.attempt+1, dec.Delay, dec.FromRetryAfter)
	rec := it.retryRecord(e.tierNames[tier], f, dec.Due)
	e.cl.Produce(e.produceCtx, rec, func(_ *kgo.Record, err error) { e.retried(it, f, rec, err, false) })
}

// retried handles the outcome of a retry-tier write. alone says the record was written on its own.
// A batch rejected as too large is written again one record at a time, so that only a record too
// large itself is dead-lettered, not the others of its batch.
func (e *Engine) retried(it *item, f *failure, rec *kgo.Record, err error, alone bool) {
	if err == nil {
		e.finish(it, metrics.OutcomeRetried)
		return
	}
	if e.produceCtx.Err() != nil {
		e.abandonItem(it)
		return
	}
	e.m.RetryProduceErr.Inc()
	if !alone && tooLarge(err) {
		e.writeAlone(e.solo, rec, func(err error) { e.retried(it, f, rec, err, true) })
		return
	}
	e.log.Error("Writing to a retry tier failed; dead-lettering the record", "topic", rec.Topic,
		"originalTopic", it.view.Topic, "originalPartition", it.view.Partition, "originalOffset", it.view.Offset, "error", err)
	g := *f
	g.reason = headers.ReasonUndeliverable
	g.errorType = headers.ErrorTypeRetryProduceFailed
	g.message = "writing to retry tier " + rec.Topic + " failed: " + err.Error() + " (last failure: " + f.errorType + ": " + f.message + ")"
	e.deadLetter(it, &g, it.attempt)
}

// tooLarge reports whether a write failed because the broker took its batch for too large.
func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// writeAlone writes rec in a batch of its own, through a solo client (one such write at a time),
// and calls then with the outcome: after a whole batch was rejected as too large, it tells whether
// this record is the one too large.
func (e *Engine) writeAlone(cl *kgo.Client, rec *kgo.Record, then func(error)) {
	go func() {
		e.aloneMu.Lock()
		err := cl.ProduceSync(e.produceCtx, rec).FirstErr()
		e.aloneMu.Unlock()
		then(err)
	}()
}

// deadLetter writes the record to the dead letter topic; it finishes once acknowledged. A failed
// write is retried a few times, then written stripped, and reported stuck if even that fails
// (deadletter.go).
func (e *Engine) deadLetter(it *item, f *failure, attempts int32) {
	rec := it.deadLetterRecord(e.dlqTopic, e.group, e.pipelineID, attempts, f)
	e.produceDLQ(it, rec, f.reason)
}

func (e *Engine) produceDLQ(it *item, rec *kgo.Record, reason string) {
	e.dlq.Produce(e.produceCtx, rec, func(_ *kgo.Record, err error) { e.deadLettered(it, rec, reason, err, false) })
}

// hdr is a record header with a string value.
func hdr(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// outHeaders starts the headers of a record written after a failure: the record's own headers,
// its original coordinates and, for a replayed dead letter, the replay headers unchanged, with room
// for n more.
func (it *item) outHeaders(n int) []kgo.RecordHeader {
	v := it.view
	hs := make([]kgo.RecordHeader, 0, len(v.Headers)+6+n)
	hs = append(hs, v.Headers...)
	hs = append(hs,
		hdr(headers.OriginalTopic, v.Topic),
		hdr(headers.OriginalPartition, strconv.FormatInt(int64(v.Partition), 10)),
		hdr(headers.OriginalOffset, strconv.FormatInt(v.Offset, 10)),
		hdr(headers.OriginalTimestamp, headers.FormatTime(v.Timestamp)),
	)
	if it.replayOf != "" {
		hs = append(hs, hdr(headers.ReplayOf, it.replayOf), hdr(headers.ReplayCount, strconv.Itoa(it.replayCount)))
	}
	return hs
}

// failureHeaders appends the failure context shared by retry and dead-letter records.
func (it *item) failureHeaders(hs []kgo.RecordHeader, attempts int32, f *failure) []kgo.RecordHeader {
	first := it.firstFailure
	if first.IsZero() {
		first = f.at
	}
	hs = append(hs,
		hdr(headers.Attempts, strconv.FormatInt(int64(attempts), 10)),
		hdr(headers.FirstFailure, headers.FormatTime(first)),
		hdr(headers.LastFailure, headers.FormatTime(f.at)),
		hdr(headers.ErrorType, headers.TruncateErrorType(f.errorType)),
		hdr(headers.ErrorMessage, headers.TruncateMessage(f.message)),
	)
	if f.httpStatus != 0 {
		hs = append(hs, hdr(headers.HTTPStatus, strconv.Itoa(f.httpStatus)))
	}
	if f.rule != "" {
		hs = append(hs, hdr(headers.Rule, f.rule))
	}
	return hs
}

// retryRecord is the record written to a retry tier after delivery number it.attempt failed.
func (it *item) retryRecord(topic string, f *failure, due time.Time) *kgo.Record {
	hs := it.outHeaders(10)
	hs = append(hs, hdr(headers.SourceTimestamp, headers.FormatTime(it.srcTime)))
	hs = it.failureHeaders(hs, it.attempt, f)
	hs = append(hs, hdr(headers.Due, headers.FormatTime(due)))
	return &kgo.Record{Topic: topic, Key: it.view.Key, Value: it.view.Value, Headers: hs}
}

// deadLetterRecord is the record written to the dead letter topic. attempts is the number of
// deliveries made.
func (it *item) deadLetterRecord(topic, group, pipeline string, attempts int32, f *failure) *kgo.Record {
	hs := it.outHeaders(12)
	hs = append(hs, hdr(headers.ConsumerGroup, group), hdr(headers.Pipeline, pipeline))
	hs = it.failureHeaders(hs, attempts, f)
	hs = append(hs, hdr(headers.Reason, f.reason))
	return &kgo.Record{Topic: topic, Key: it.view.Key, Value: it.view.Value, Headers: hs}
}
