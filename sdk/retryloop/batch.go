package retryloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/retry"
)

// BatchHandler processes a batch of records and returns one error per record: errs[i] is the fate
// of records[i], nil for a success, else classified exactly as a Handler's error is (Permanent,
// Transient, HTTPStatus, RetryAfter, Undeliverable, ErrorType, message patterns). Each record then
// gets the fate it would get alone: a failed one goes to its retry tier (and may come back in
// another batch) or to the dead letter queue with its own reason, the others are committed.
//
// A record without an entry (errs shorter than records, nil included) fails with error type
// BatchResultMissing, classified as an HTTP 502 is: it never succeeds by omission. Entries past
// len(records) are ignored. To fail the whole batch, return the same error for every record.
//
// The records show the ORIGINAL coordinates and only their own headers, as for a Handler;
// BatchInfo(ctx, i) tells record i's attempt and idempotency key. In Ordered mode a partition's
// records are consecutive and in offset order, and must be processed in that order. The context is
// cancelled at the policy's attemptTimeout, which covers the whole batch. A panic fails every
// record with error type Panic, as a Handler's panic fails its record. It may be called from
// several goroutines at once, one batch each, up to maxInFlight records in all.
type BatchHandler func(ctx context.Context, records []*kgo.Record) []error

type batchInfoKey struct{}

// BatchInfo returns the delivery of record i of the batch a BatchHandler's context belongs to.
func BatchInfo(ctx context.Context, i int) (DeliveryInfo, bool) {
	infos, ok := ctx.Value(batchInfoKey{}).([]DeliveryInfo)
	if !ok || i < 0 || i >= len(infos) {
		return DeliveryInfo{}, false
	}
	return infos[i], true
}

// NewBatch builds a loop that delivers records in batches to h. The batches are bounded by the
// config's delivery.batch (maxRecords, maxBytes: here the records' keys, values and headers,
// maxWait); a config without delivery.batch gets its defaults (100 records, 1 MiB, 50ms), since
// calling NewBatch is the opt-in. delivery.maxInFlight
// counts records, so at its default of 100 only one batch of 100 is in flight: raise it to
// maxRecords times the batches wanted at once. Otherwise as New.
func NewBatch(cfg *Config, h BatchHandler, opts ...Option) (*Loop, error) {
	if h == nil {
		return nil, errors.New("retryloop: a batch handler is required")
	}
	if cfg == nil {
		var err error
		if cfg, err = LoadConfig("", os.Getenv); err != nil {
			return nil, err
		}
	}
	if cfg.Delivery.Batch == nil {
		c := *cfg                          // the caller's config stays as it was
		c.Delivery.Batch = &config.Batch{} // its defaults, filled by Default
		cfg = &c
	}
	return newLoop(cfg, nil, h, opts)
}

// batchHandler adapts a BatchHandler to the engine: the delivery info of each record in the
// context, each error turned into a Result as a Handler's is, and a panic into an error of type
// Panic for every record.
type batchHandler struct {
	h   BatchHandler
	log *slog.Logger
}

func (b *batchHandler) DeliverBatch(ctx context.Context, ds []*dispatcher.Delivery) (res []dispatcher.Result) {
	recs := make([]*kgo.Record, len(ds))
	infos := make([]DeliveryInfo, len(ds))
	for i, d := range ds {
		recs[i] = d.Record
		infos[i] = DeliveryInfo{Attempt: d.Attempt, IdempotencyKey: d.IdempotencyKey, FirstFailure: d.FirstFailure, Consumed: d.Consumed}
	}
	ctx = context.WithValue(ctx, batchInfoKey{}, infos)
	defer func() {
		if p := recover(); p != nil {
			b.log.Error("Batch handler panicked", "records", len(ds), "panic", fmt.Sprint(p))
			r := result(ctx, &panicError{value: p})
			res = make([]dispatcher.Result, len(ds))
			for i := range res {
				res[i] = r
			}
		}
	}()
	errs := b.h(ctx, recs)
	if len(errs) != len(ds) {
		b.log.Warn("Batch handler returned a result count other than its record count; the records without one fail as BatchResultMissing",
			"records", len(ds), "results", len(errs))
	}
	res = make([]dispatcher.Result, len(ds))
	for i := range res {
		if i < len(errs) {
			res[i] = result(ctx, errs[i])
		} else {
			res[i] = missingResult
		}
	}
	return res
}

// missingResult is the fate of a record the handler returned no error for, the engine's for a
// record a batch answer leaves out: a failure classified as an HTTP 502 would be.
var missingResult = dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 502, ErrorType: batch.ErrorTypeResultMissing,
	Message: "the batch handler returned no result for this record"}}

// Deliver is a batch of one, for a record the engine delivers alone.
func (b *batchHandler) Deliver(ctx context.Context, d *dispatcher.Delivery) dispatcher.Result {
	return b.DeliverBatch(ctx, []*dispatcher.Delivery{d})[0]
}
