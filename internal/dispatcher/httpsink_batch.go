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

	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/retry"
	"github.com/retryops/retry-operator/pkg/batch"
)

// batchSeq numbers batch requests, from a random start so that a restarted dispatcher does not
// reuse its predecessor's ids either.
var batchSeq = func() *atomic.Uint64 {
	var n atomic.Uint64
	n.Store(rand.Uint64() >> 1)
	return &n
}()

// DeliverBatch implements BatchHandler: one POST of the batch document (pkg/batch), a result per
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
		return fill(out, batchStatusResult(s.statusOutcome(resp)))
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
	results, _, err := batch.ParseResponseStats(bytes.NewReader(raw), ids, limit)
	if err != nil {
		var be *batch.Error
		o := retry.Outcome{HTTPStatus: http.StatusBadGateway, ErrorType: batch.ErrorTypeResponseInvalid, Message: err.Error()}
		if errors.As(err, &be) {
			o.ErrorType, o.Message = be.Type, be.Message
		}
		return fill(out, Result{Outcome: o})
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

// recordResult is the Result of a record's failure, as a single answer with its status, error
// type, message and Retry-After would give.
func recordResult(r batch.Result) Result {
	msg := r.Message
	if msg == "" && r.HTTPStatus != 0 {
		msg = strconv.Itoa(r.HTTPStatus) + " " + http.StatusText(r.HTTPStatus)
	}
	return failureResult(retry.Outcome{HTTPStatus: r.HTTPStatus, ErrorType: r.ErrorType, Message: msg, RetryAfter: r.RetryAfter})
}

// batchStatusResult is every record's Result of a non-2xx answer to the whole batch. A 415 refuses
// the batch document's media type: it says nothing of a record alone, so the policy classifies it
// rather than dead-letter the batch as undeliverable. (A 413 of several records is split above.)
func batchStatusResult(o retry.Outcome) Result {
	if o.HTTPStatus == http.StatusUnsupportedMediaType {
		return Result{Outcome: o}
	}
	return failureResult(o)
}

func fill(out []Result, r Result) []Result {
	for i := range out {
		out[i] = r
	}
	return out
}

// batchRecord is d as a record of the batch document: what a single delivery sends in its headers.
func batchRecord(id string, d *Delivery) batch.Record {
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
	if len(r.Headers) > 0 {
		br.Headers = make([]batch.Header, len(r.Headers))
		for i, h := range r.Headers {
			br.Headers[i] = batch.Header{Key: h.Key, Value: h.Value}
		}
	}
	return br
}
