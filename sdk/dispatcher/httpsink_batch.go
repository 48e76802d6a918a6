package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// batchSeq numbers batch requests, from a random start so that a restarted dispatcher does not
// reuse its predecessor's ids either.
var batchSeq = func() *atomic.Uint64 {
	var n atomic.Uint64
	n.Store(rand.Uint64() >> 1)
	return &n
}()

// DeliverBatch implements BatchHandler: one POST of the batch document (package batch), a result per
// record read from the answer. A record the answer does not say succeeded never succeeds.
func (s *HTTPSink) DeliverBatch(ctx context.Context, ds []*Delivery) []Result {
	out := make([]Result, len(ds))
	if len(ds) == 0 {
		return out
	}
	recs := make([]batch.Record, len(ds))
	ids := make([]string, len(ds))
	// Ids unique to this request: an answer to another request (a sink or proxy mixing answers up)
	// names ids not in this one, so it acknowledges none of its records.
	prefix := strconv.FormatUint(batchSeq.Add(1), 36) + "."
	for i, d := range ds {
		ids[i] = prefix + strconv.Itoa(i)
		recs[i] = batchRecord(ids[i], d)
	}
	var body bytes.Buffer
	if err := batch.EncodeRequest(&body, recs); err != nil {
		return fill(out, Result{Undeliverable: true, Outcome: retry.Outcome{ErrorType: headers.ErrorTypeUndeliverable, Message: err.Error()}})
	}
	n := body.Len()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, &body)
	if err != nil {
		return fill(out, Result{Undeliverable: true, Outcome: retry.Outcome{ErrorType: headers.ErrorTypeUndeliverable, Message: err.Error()}})
	}
	req.Header.Set("Content-Type", batch.MediaType)
	noReplay(req, n)
	resp, err := s.rt.RoundTrip(req)
	if err != nil {
		return fill(out, transportResult(ctx, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusRequestEntityTooLarge && len(ds) > 1 {
		// The sink refused the request's size and processed none of it: the halves are sent in
		// order, down to records alone, so that each gets what it would get alone.
		readBody(resp.Body, maxDrain, 0, nil)
		_ = resp.Body.Close()
		h := len(ds) / 2
		copy(out, s.DeliverBatch(ctx, ds[:h]))
		copy(out[h:], s.DeliverBatch(ctx, ds[h:]))
		return out
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		r := batchStatusResult(s.statusOutcome(resp))
		if r.Outcome.ErrorType == batch.ErrorTypeNotSupported {
			var p answerProblems
			p[metrics.AnswerNotSupported] = 1
			reportAnswer(ctx, len(ds), p)
		}
		return fill(out, r)
	}
	limit := batch.ResponseLimit(len(ds))
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		// The answer broke off: as a broken connection, not as an invalid answer.
		return fill(out, transportResult(ctx, err))
	}
	if int64(len(raw)) <= limit {
		readBody(resp.Body, maxDrain, 0, nil)
	}
	results, st, err := batch.ParseResponseStats(bytes.NewReader(raw), ids, limit)
	if err != nil {
		var be *batch.Error
		o := retry.Outcome{HTTPStatus: http.StatusBadGateway, ErrorType: batch.ErrorTypeResponseInvalid, Message: err.Error()}
		if errors.As(err, &be) {
			o.ErrorType, o.Message = be.Type, be.Message
		}
		var p answerProblems
		if o.ErrorType == batch.ErrorTypeResponseTooLarge {
			p[metrics.AnswerTooLarge] = 1
		} else {
			p[metrics.AnswerInvalid] = 1
		}
		reportAnswer(ctx, len(ds), p)
		return fill(out, Result{Outcome: o})
	}
	if st.Problems() {
		var p answerProblems
		p[metrics.AnswerUnknownID] = st.Unknown
		p[metrics.AnswerDuplicateID] = st.Duplicates
		p[metrics.AnswerConflictingID] = st.Conflicts
		p[metrics.AnswerInvalidStatus] = st.InvalidStatus
		p[metrics.AnswerInvalidResult] = st.InvalidResult
		reportAnswer(ctx, len(ds), p)
	}
	for i, id := range ids {
		r, ok := results[id]
		switch {
		case !ok:
			out[i] = Result{Outcome: retry.Outcome{HTTPStatus: http.StatusBadGateway, ErrorType: batch.ErrorTypeResultMissing,
				Message: "the batch response has no result for this record"}}
		case r.Status == batch.StatusSuccess:
			out[i] = Result{Success: true}
		default:
			out[i] = recordResult(r)
		}
	}
	return out
}

// answerProblems counts what an answer to a batch got wrong, indexed as metrics.AnswerProblems.
type answerProblems [len(metrics.AnswerProblems)]int

type answerReportKey struct{}

// withAnswerReport makes the batch handlers of this package report to f what the answers to the
// batch delivered under ctx got wrong: the engine counts and logs it, so that a sink answering
// badly shows before records pile up in the tiers.
func withAnswerReport(ctx context.Context, f func(records int, p answerProblems)) context.Context {
	return context.WithValue(ctx, answerReportKey{}, f)
}

func reportAnswer(ctx context.Context, records int, p answerProblems) {
	if f, ok := ctx.Value(answerReportKey{}).(func(int, answerProblems)); ok {
		f(records, p)
	}
}

// recordResult is the Result of a record's failure, as a single answer with its status, error
// type, message and Retry-After would give: its texts are read as a single answer's are
// (failureErrorType, failureMessage), so the policy matches the same text.
func recordResult(r batch.Result) Result {
	if r.HTTPStatus == 0 && sinkProtocolError(r.ErrorType) {
		// The sink's answer for this record is itself wrong (results that disagree, an unknown
		// status, a status that is no HTTP status): classified as a bad answer to the whole batch
		// is, a 502, not by the policy's default.
		r.HTTPStatus = http.StatusBadGateway
	}
	return failureResult(retry.Outcome{HTTPStatus: r.HTTPStatus, ErrorType: failureErrorType(r.ErrorType),
		Message: failureMessage(r.Message, r.HTTPStatus), RetryAfter: r.RetryAfter})
}

// sinkProtocolError tells the error types package batch gives a record whose result broke the contract.
func sinkProtocolError(errorType string) bool {
	switch errorType {
	case batch.ErrorTypeResultConflict, batch.ErrorTypeResponseInvalid, batch.ErrorTypeInvalidStatus:
		return true
	}
	return false
}

// batchStatusResult is every record's Result of a non-2xx answer to the whole batch. A 415 refuses
// the batch document's media type: the sink takes no batches, which says nothing of a record
// alone, so every record is retried (BatchNotSupported) whatever the policy says of a 4xx, and
// waits in the tiers for the sink or the pipeline to be fixed (up to maxAttempts and the deadline,
// as any retry). (A 413 of several records is split above.)
func batchStatusResult(o retry.Outcome) Result {
	if o.HTTPStatus == http.StatusUnsupportedMediaType {
		o.ErrorType = batch.ErrorTypeNotSupported
		return Result{Outcome: o, Force: retry.ActionRetry}
	}
	return failureResult(o)
}

func fill(out []Result, r Result) []Result {
	for i := range out {
		out[i] = r
	}
	return out
}

// maxBatchIDBytes bounds a record id DeliverBatch writes: a base-36 uint64, a dot and an index.
const maxBatchIDBytes = 13 + 1 + 20

var _ BatchSizer = (*HTTPSink)(nil)

// BatchOverhead implements BatchSizer.
func (s *HTTPSink) BatchOverhead() int64 { return int64(batch.RequestOverhead) }

// BatchRecordSize implements BatchSizer: an upper bound of d's bytes in the batch document.
func (s *HTTPSink) BatchRecordSize(d *Delivery) int64 {
	br := batchRecordHead("", d)
	n := br.EncodedSize() + maxBatchIDBytes
	for i, h := range d.Record.Headers {
		n += batch.HeaderSize(h.Key, h.Value)
		if i > 0 {
			n++
		}
	}
	return int64(n)
}

// batchRecord is d as a record of the batch document: what a single delivery sends in its headers.
func batchRecord(id string, d *Delivery) batch.Record {
	br := batchRecordHead(id, d)
	if hs := d.Record.Headers; len(hs) > 0 {
		br.Headers = make([]batch.Header, len(hs))
		for i, h := range hs {
			br.Headers[i] = batch.Header{Key: h.Key, Value: h.Value}
		}
	}
	return br
}

// batchRecordHead is batchRecord without the record's headers.
func batchRecordHead(id string, d *Delivery) batch.Record {
	r := d.Record
	br := batch.Record{
		ID:             id,
		IdempotencyKey: d.IdempotencyKey,
		Attempt:        d.Attempt,
		Topic:          r.Topic,
		Partition:      r.Partition,
		Offset:         r.Offset,
		Timestamp:      r.Timestamp,
		RawKey:         r.Key,
		RawValue:       r.Value,
		ReplayOf:       d.ReplayOf,
	}
	if d.ReplayOf != "" {
		br.ReplayCount = int32(min(d.ReplayCount, 1<<31-1))
	}
	if !d.FirstFailure.IsZero() {
		t := d.FirstFailure
		br.FirstFailure = &t
	}
	br.DeliveredFrom = d.IdempotencyKey
	if c := d.Consumed; c != nil && c != r {
		br.DeliveredFrom = headers.IdempotencyKey(c.Topic, c.Partition, c.Offset)
	}
	return br
}
