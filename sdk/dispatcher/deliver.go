package dispatcher

import (
	"context"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retry"
)

// dispatchLocked hands an item to a worker, starting one when none is idle; when next is not nil
// and empty, the item goes there instead, to the worker that is settling a record.
func (e *Engine) dispatchLocked(it *item, next **item) {
	if next != nil && *next == nil {
		*next = it
		return
	}
	if e.idle.Add(-1) < 0 {
		e.idle.Add(1)
		e.workers.Add(1)
		go e.worker()
	}
	e.work <- job{it: it} // never blocks: the channel holds maxInFlight items
}

// job is a worker's task: one item, or a batch (batch.go).
type job struct {
	it    *item
	batch []*item
}

func (e *Engine) worker() {
	defer e.workers.Done()
	for j := range e.work {
		it := j.it
		if j.batch != nil {
			it = e.processBatchSafe(j.batch)
		}
		for it != nil {
			it = e.processSafe(it)
		}
		e.idle.Add(1)
	}
}

// maxPanicMessage bounds the error message of a record dead-lettered after a panic.
const maxPanicMessage = 1024

// processSafe is process with no panic escaping: a panic while processing a record, in the handler
// or the dispatcher, is counted and the record, unless already finished, is dead-lettered with
// reason undeliverable (error type Panic, the panic value as the message): the record, not the
// sink, is at fault as far as the dispatcher can tell, and a crash would only redeliver it.
func (e *Engine) processSafe(it *item) (next *item) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		next = nil
		e.m.Panics.Inc()
		msg := fmt.Sprint(v)
		if len(msg) > maxPanicMessage {
			msg = msg[:maxPanicMessage] + "..."
		}
		e.log.Error("Processing a record panicked; dead-lettering it", "topic", it.rec.Topic, "partition", it.rec.Partition,
			"offset", it.rec.Offset, "panic", msg, "stack", string(debug.Stack()))
		e.releasePermit(it) // unless finish recorded the outcome
		e.mu.Lock()
		settled := it.fate != fateUnsettled
		e.mu.Unlock()
		if settled {
			return
		}
		attempts := min(max(it.attempt, 0), e.maxAttempts())
		e.deadLetter(it, &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypePanic, message: "panic: " + msg,
			at: e.clock.Now()}, attempts)
	}()
	return e.process(it)
}

// process delivers one item and decides its fate: settled at once (delivered, dropped, abandoned)
// or once the record it needs is written (retried, dead-lettered). It returns the next item for
// this worker, when settling this one dispatched another.
func (e *Engine) process(it *item) *item {
	if it.repark {
		e.reparkWrite(it)
		return nil
	}
	if it.pre != nil {
		it.pre.at = e.clock.Now()
		e.deadLetter(it, it.pre, it.attempt-1)
		return nil
	}
	start := e.begin(it)
	ctx, cancel := it.part.ctx, context.CancelFunc(nil)
	if e.attemptTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, e.attemptTimeout)
	}
	res := e.handler.Deliver(ctx, &it.d)
	e.busyEnd(it)
	if cancel != nil {
		cancel()
	}
	return e.finish(it, res, start, e.clock.Now())
}

// begin prepares an item's Delivery and counts it busy; it returns the delivery's start.
func (e *Engine) begin(it *item) time.Time {
	start := e.clock.Now()
	if !it.due.IsZero() {
		e.m.RetryLateness.Observe(start.Sub(it.due).Seconds())
	}
	if it.d.Record == nil { // else batchRecordSize built it
		it.d = newDelivery(it)
	}
	e.busyStart(it, start)
	return start
}

// finish decides an item's fate from its delivery's Result, alone or in a batch: every rule after
// the delivery (the breaker, the policy, the tiers, the dead letter) is the same either way.
func (e *Engine) finish(it *item, res Result, start, now time.Time) *item {
	e.m.DeliveryDuration.Observe(now.Sub(start).Seconds())
	if res.Success {
		e.m.Attempt(it.attempt, true)
		e.recordPermit(it, true)
		return e.settleInWorker(it, fateDelivered)
	}
	if it.part.ctx.Err() != nil {
		// A failure while abandoning in-flight work (a stop past its drain timeout, a revocation):
		// likely caused by the cancellation itself, so neither committed nor retried, and saying
		// nothing of the sink: the breaker's permit goes back unused.
		e.releasePermit(it)
		e.settle(it, fateAbandoned, nil)
		return nil
	}
	e.m.Attempt(it.attempt, false)

	o := res.Outcome
	f := &failure{at: now, message: o.Message, httpStatus: o.HTTPStatus}
	if o.Transport != retry.TransportNone {
		f.httpStatus = 0
	}
	if res.Undeliverable {
		e.recordPermit(it, true) // the sink is fine; the record is not
		f.reason = headers.ReasonUndeliverable
		f.errorType = o.ErrorType
		if f.errorType == "" {
			f.errorType = headers.ErrorTypeUndeliverable
		}
		e.deadLetter(it, f, it.attempt)
		return nil
	}
	dec := e.decide(it, res, now)
	e.recordPermit(it, !unhealthy(o, dec))
	f.rule = dec.Rule
	f.errorType = dec.ErrorType
	if f.errorType == "" && f.httpStatus != 0 {
		f.errorType = "HTTP" + strconv.Itoa(f.httpStatus)
	}
	if f.message == "" {
		f.message = f.errorType
	}
	switch dec.Action {
	case retry.ActionRetry:
		e.toRetryTier(it, f, dec)
	case retry.ActionDeadLetter:
		f.reason = string(dec.Reason)
		e.deadLetter(it, f, it.attempt)
	default: // Drop
		return e.settleInWorker(it, fateDropped)
	}
	return nil
}

// recordPermit gives the breaker the outcome of a delivery it admitted (it.allowed), once.
func (e *Engine) recordPermit(it *item, success bool) {
	if it.allowed {
		it.allowed = false
		e.breaker.Record(success)
	}
}

// releasePermit hands back the breaker's permit of a record it admitted whose delivery was never
// made or says nothing of the sink (abandoned, past its deadline before it was sent, a panic),
// once: it neither closes nor opens the breaker, and a half-open breaker admits another probe.
func (e *Engine) releasePermit(it *item) {
	if it.allowed {
		it.allowed = false
		e.breaker.Release(it.permit)
	}
}

// settleInWorker settles it from a worker and returns the record settling dispatched first, for
// the worker to deliver next.
func (e *Engine) settleInWorker(it *item, f fate) *item {
	var next *item
	e.settle(it, f, &next)
	return next
}

// unhealthy says whether a failure counts against the circuit breaker: the sink did not answer,
// answered 408, 429 or 5xx, or the failure was classified retriable. A deliberate rejection
// (a 4xx the policy dead-letters) shows a healthy sink.
func unhealthy(o retry.Outcome, d retry.Decision) bool {
	if o.Transport != retry.TransportNone || o.HTTPStatus >= 500 || o.HTTPStatus == 408 || o.HTTPStatus == 429 {
		return true
	}
	return d.Action == retry.ActionRetry || d.Reason == retry.ReasonMaxRetriesExceeded
}

// decide applies the policy, or a handler's forced action.
func (e *Engine) decide(it *item, res Result, now time.Time) retry.Decision {
	o := res.Outcome
	switch res.Force {
	case retry.ActionDeadLetter:
		return retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonNonRetriable, ErrorType: errorTypeOf(o), MaxAttempts: e.pol.MaxAttempts()}
	case retry.ActionRetry:
		d := retry.Decision{Action: retry.ActionRetry, ErrorType: errorTypeOf(o), MaxAttempts: e.pol.MaxAttempts()}
		if it.attempt >= d.MaxAttempts {
			d.Action, d.Reason = retry.ActionDeadLetter, retry.ReasonMaxRetriesExceeded
			return d
		}
		d.Delay, _ = e.pol.Sample(it.attempt, e.rng)
		if e.raHonor && o.RetryAfter > 0 {
			d.Delay, d.FromRetryAfter = min(o.RetryAfter, e.raMax), true
		}
		d.Due = now.Add(d.Delay)
		if dl, ok := e.pol.DeadlineOf(it.srcTime); ok && d.Due.After(dl) {
			d.Action, d.Reason, d.Delay, d.Due = retry.ActionDeadLetter, retry.ReasonDeadlineExceeded, 0, time.Time{}
		}
		return d
	default:
		return e.pol.Decide(o, it.attempt, it.srcTime, now, e.rng)
	}
}

func errorTypeOf(o retry.Outcome) string {
	if o.Transport != retry.TransportNone {
		return o.Transport.ErrorType()
	}
	return o.ErrorType
}
