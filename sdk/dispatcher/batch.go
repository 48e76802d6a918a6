package dispatcher

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Batch delivery (delivery.batch with Options.BatchHandler). The scheduler starts records as it
// does one at a time (the same checks, slots and breaker permits) but adds them to the batch being
// filled (e.pend) instead of handing each to a worker. The batch is sent when it holds batchMax
// records, when the next record would take it past batchBytes (a record larger than batchBytes
// goes in a batch of its own), when maxInFlight records are started (nothing more can join), or
// batchWait after its first record on the engine's clock (the scheduler's timer). A worker then
// delivers it under one attempt timeout and finishes each record with its own Result, as a
// record delivered alone is finished.
//
// Ordered mode: a source partition's next record may start while the partition's only records in
// flight are in the batch being filled (canStartLocked: inFlight == batched), so a batch holds a
// partition's records consecutive and in offset order; once the batch is sent, nothing more of the
// partition starts until every one of them finished, so a partition has at most one batch in
// flight, as it has one record in flight without batching.

// batchSettings are delivery.batch's bounds, defaults filled; batchMax 0 without it.
func batchSettings(b *config.Batch) (batchMax int, batchBytes int64, batchWait time.Duration) {
	if b == nil {
		return 0, 0, 0
	}
	batchMax, batchBytes = int(b.MaxRecords), b.MaxBytes
	if batchMax < 1 {
		batchMax = config.DefaultBatchMaxRecords
	}
	if batchBytes < 1 {
		batchBytes = config.DefaultBatchMaxBytes
	}
	return batchMax, batchBytes, config.Dur(b.MaxWait, config.DefaultBatchMaxWait)
}

// missingResult is the Result of a record the batch handler returned no result for: a failure
// classified as an HTTP 502 would be, never a success.
var missingResult = Result{Outcome: retry.Outcome{HTTPStatus: 502, ErrorType: batch.ErrorTypeResultMissing,
	Message: "the batch response has no result for this record"}}

// BatchSizer is implemented by a BatchHandler whose request for a batch is larger than its
// records' keys, values and headers (the HTTP sink's JSON document: escapes, base64, the fields
// of each record): delivery.batch.maxBytes then bounds the requests it sends.
type BatchSizer interface {
	// BatchOverhead is the bytes of a request besides its records.
	BatchOverhead() int64
	// BatchRecordSize is at least the bytes d takes in a request.
	BatchRecordSize(d *Delivery) int64
}

// newDelivery is the Delivery of a started item.
func newDelivery(it *item) Delivery {
	return Delivery{Record: it.view, Consumed: it.rec, Attempt: it.attempt, IdempotencyKey: it.idempotencyKey(), FirstFailure: it.firstFailure,
		ReplayOf: it.replayOf, ReplayCount: it.replayCount}
}

// batchAddLocked adds a started record to the batch being filled, sending the batch first when the
// record would take it past batchBytes, and after when it is full.
func (e *Engine) batchAddLocked(it *item, now time.Time) {
	size := e.batchRecordSize(it)
	if len(e.pend) > 0 && e.pendBytes+size > e.batchBytes {
		e.flushBatchLocked()
	}
	if len(e.pend) == 0 {
		e.pendSince = now
		if e.batchSizer != nil {
			e.pendBytes = e.batchSizer.BatchOverhead()
		}
	}
	e.pend = append(e.pend, it)
	e.pendBytes += size
	it.part.batched++
	if len(e.pend) >= e.batchMax || e.pendBytes >= e.batchBytes {
		e.flushBatchLocked()
	}
}

// batchDueLocked sends the batch being filled when no record can join it any more or its wait is
// over, else returns wake moved to when its wait ends.
func (e *Engine) batchDueLocked(now, wake time.Time) time.Time {
	if len(e.pend) == 0 {
		return wake
	}
	due := e.pendSince.Add(e.batchWait)
	if e.active >= e.maxInFlight || !now.Before(due) {
		e.flushBatchLocked()
		return wake
	}
	return earliest(wake, due)
}

// flushBatchLocked hands the batch being filled to a worker.
func (e *Engine) flushBatchLocked() {
	if len(e.pend) == 0 {
		return
	}
	b := e.pend
	e.pend, e.pendBytes = nil, 0
	for _, it := range b {
		it.part.batched = 0
	}
	if e.idle.Add(-1) < 0 {
		e.idle.Add(1)
		e.workers.Add(1)
		go e.worker()
	}
	e.work <- job{batch: b} // never blocks: every job holds at least one of maxInFlight records
}

// batchRecordSize is what a record puts in a batch: what the handler's BatchSizer says, else its
// key, value and delivered headers.
func (e *Engine) batchRecordSize(it *item) int64 {
	if it.batchSize > 0 {
		return it.batchSize
	}
	if e.batchSizer != nil {
		it.d = newDelivery(it) // begin keeps it
		it.batchSize = e.batchSizer.BatchRecordSize(&it.d)
		return it.batchSize
	}
	n := int64(len(it.view.Key) + len(it.view.Value))
	for _, h := range it.view.Headers {
		n += int64(len(h.Key) + len(h.Value))
	}
	it.batchSize = max(n, 1) // 0 stands for not sized
	return it.batchSize
}

// batchProgress is how far processBatch got: the records it handed to finish (whose fate is
// decided, even if its write is still pending) and the next item settling them dispatched.
type batchProgress struct {
	items    []*item // the records sent, once processBatch chose them
	finished int     // of items
	next     *item
}

// processBatchSafe is processBatch with no panic escaping: as processSafe does for one record,
// every record of the batch not finished and not settled is dead-lettered with error type Panic. One
// already finished keeps its fate (its retry or dead-letter write may still be pending: a second
// write would duplicate it), and the next item it dispatched is still delivered.
func (e *Engine) processBatchSafe(b []*item) (next *item) {
	pr := batchProgress{items: b}
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		next = pr.next
		e.m.Panics.Inc()
		msg := fmt.Sprint(v)
		if len(msg) > maxPanicMessage {
			msg = msg[:maxPanicMessage] + "..."
		}
		e.log.Error("Processing a batch panicked; dead-lettering its records not yet finished", "records", len(pr.items),
			"panic", msg, "stack", string(debug.Stack()))
		for _, it := range pr.items[pr.finished:] {
			e.busyEnd(it)
			e.releasePermit(it)
			e.mu.Lock()
			settled := it.fate != fateUnsettled
			e.mu.Unlock()
			if settled {
				continue
			}
			attempts := min(max(it.attempt, 0), e.maxAttempts())
			e.deadLetter(it, &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypePanic, message: "panic: " + msg,
				at: e.clock.Now()}, attempts)
		}
	}()
	return e.processBatch(b, &pr)
}

// processBatch delivers a batch under one attempt timeout and finishes each record with its own
// Result (missingResult for one the handler left out). It returns the next item for this worker.
func (e *Engine) processBatch(b []*item, pr *batchProgress) *item {
	b = e.unsendable(b, pr)
	if len(b) == 0 {
		return nil
	}
	starts := make([]time.Time, len(b))
	ds := make([]*Delivery, len(b))
	for i, it := range b {
		starts[i] = e.begin(it)
		ds[i] = &it.d
	}
	ctx, cancel := batchContext(b)
	if e.attemptTimeout > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, e.attemptTimeout)
		defer c2()
	}
	ctx = withAnswerReport(ctx, e.answerProblems)
	t0 := e.clock.Now()
	res := e.batchH.DeliverBatch(ctx, ds)
	for _, it := range b {
		e.busyEnd(it)
	}
	cancel()
	now := e.clock.Now()
	e.m.BatchSize.Observe(float64(len(b)))
	e.m.BatchDuration.Observe(now.Sub(t0).Seconds())
	ok := 0
	for i := range b {
		if i < len(res) && res[i].Success {
			ok++
		}
	}
	switch ok {
	case len(b):
		e.m.Batches[metrics.BatchSuccess].Inc()
	case 0:
		e.m.Batches[metrics.BatchFailure].Inc()
	default:
		e.m.Batches[metrics.BatchPartial].Inc()
	}
	for i, it := range b {
		r := missingResult
		if i < len(res) {
			r = res[i]
		}
		n := e.finish(it, r, starts[i], now)
		pr.finished = i + 1
		switch {
		case n == nil:
		case pr.next == nil:
			pr.next = n
		default:
			e.mu.Lock()
			e.dispatchLocked(n, nil)
			e.mu.Unlock()
		}
	}
	return pr.next
}

// unsendable takes out of a batch about to be sent the records that would not be sent alone at
// this moment, having waited for the batch to fill: a record of a partition being revoked is
// abandoned (its next owner delivers it), and one past the policy's deadline is dead-lettered
// deadline_exceeded, as the scheduler does at start. It returns the records to send.
func (e *Engine) unsendable(b []*item, pr *batchProgress) []*item {
	now := e.clock.Now()
	var send, revoked, expired []*item
	e.mu.Lock()
	for i, it := range b {
		if send == nil && !it.part.revoking && it.part.ctx.Err() == nil && !e.pol.Expired(it.srcTime, now) {
			continue // no slice until a record is taken out
		}
		if send == nil {
			send = append(make([]*item, 0, len(b)), b[:i]...)
		}
		switch {
		case it.part.revoking || it.part.ctx.Err() != nil:
			revoked = append(revoked, it)
		case e.pol.Expired(it.srcTime, now):
			expired = append(expired, it)
		default:
			send = append(send, it)
		}
	}
	e.mu.Unlock()
	if send == nil {
		return b
	}
	pr.items = send
	for _, it := range revoked {
		e.releasePermit(it) // the sink was not asked
		e.settle(it, fateAbandoned, nil)
	}
	for _, it := range expired {
		e.releasePermit(it)
		e.deadLetter(it, &failure{reason: headers.ReasonDeadlineExceeded, errorType: headers.ErrorTypeDeadlineExceeded, at: now,
			message: "the record is past its deadline (" + e.pol.Policy().Deadline.String() + " after " + headers.FormatTime(it.srcTime) +
				") while waiting for its batch to fill"}, it.attempt-1)
	}
	return send
}

// answerProblems counts and logs what the sink's answer to a batch got wrong: counts, never the
// ids or messages, so that a hostile answer cannot flood the log.
func (e *Engine) answerProblems(records int, p answerProblems) {
	args := make([]any, 0, 2+2*len(p))
	args = append(args, "records", records)
	for i, n := range p {
		if n > 0 {
			e.m.AnswerProblems[i].Add(float64(n))
			args = append(args, metrics.AnswerProblems[i], n)
		}
	}
	if p[metrics.AnswerNotSupported] > 0 {
		// Every batch will fail until someone fixes the sink or the pipeline.
		e.log.Error("The sink refused a batch with 415: it does not take batch documents; its records are retried", args...)
		return
	}
	e.log.Warn("The sink's answer to a batch was wrong; the records concerned were not acknowledged", args...)
}

// batchContext is the context of a batch's delivery: it ends once every partition of the batch
// was forgotten (or the stop abandons every delivery), not when one of them was, so that a
// revocation does not fail the records of the partitions kept.
func batchContext(b []*item) (context.Context, context.CancelFunc) {
	first := b[0].part
	same := true
	for _, it := range b[1:] {
		if it.part != first {
			same = false
			break
		}
	}
	if same {
		return context.WithCancel(first.ctx)
	}
	ctx, cancel := context.WithCancel(context.Background())
	seen := map[*partState]bool{}
	for _, it := range b {
		seen[it.part] = true
	}
	var left atomic.Int32
	left.Store(int32(len(seen)))
	stops := make([]func() bool, 0, len(seen))
	for ps := range seen {
		stops = append(stops, context.AfterFunc(ps.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
