package dispatcher

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/retry"
)

// Delivery is one delivery of a record to the consumer.
type Delivery struct {
	// Record is the record as the consumer should see it: the ORIGINAL topic, partition, offset and
	// timestamp, the key and value, and the record's own headers (retryops.* headers removed). It
	// must not be modified.
	Record *kgo.Record
	// Consumed is the record as consumed: a retry tier's record on a retry, the source record on a
	// first delivery (then often the same pointer as Record). It must not be modified.
	Consumed *kgo.Record
	// Attempt is the delivery attempt, 1 for the first delivery.
	Attempt int32
	// IdempotencyKey is the record's stable id, the same on every attempt and on a replay from the
	// dead letter queue (headers.IdempotencyKey of the original coordinates).
	IdempotencyKey string
	// FirstFailure is the time of the first failed delivery, zero on the first attempt.
	FirstFailure time.Time
	// ReplayOf names the dead letter this record is a replay of, "<dlq topic>/<partition>/<offset>"
	// (headers.ReplayOf), on every attempt of a replayed record; "" for a record never replayed.
	ReplayOf string
	// ReplayCount is how many times the record has been replayed (headers.ReplayCount), 0 when
	// ReplayOf is "".
	ReplayCount int
}

// Result is what a Handler reports for one delivery.
type Result struct {
	// Success reports that the record was processed; the other fields are then ignored.
	Success bool
	// Outcome describes the failure; the policy's classification decides what follows (unless
	// Force is set).
	Outcome retry.Outcome
	// Force overrides the classification: ActionRetry retries (within maxAttempts and the deadline),
	// ActionDeadLetter dead-letters at once with reason non_retriable_error. "" classifies Outcome.
	Force retry.Action
	// Undeliverable dead-letters the record at once with reason undeliverable (the record itself can
	// never be processed: too large for the sink, an unsupported media type, undecodable).
	// Outcome.ErrorType and Outcome.Message describe why.
	Undeliverable bool
}

// Handler delivers records. Deliver is called concurrently (up to delivery.maxInFlight at once,
// one at a time per partition in Ordered mode) with a context bounded by the policy's
// attemptTimeout; it must return when the context is done.
type Handler interface {
	Deliver(ctx context.Context, d *Delivery) Result
}

// BatchHandler delivers records in batches (delivery.batch). DeliverBatch is called with up to
// delivery.batch.maxRecords deliveries, under one attempt timeout; it returns one Result per
// delivery, in the same order (a shorter slice fails the missing ones, never succeeds them). In
// Ordered mode the deliveries of one partition are consecutive and in offset order, and the handler
// must process them in that order.
type BatchHandler interface {
	DeliverBatch(ctx context.Context, ds []*Delivery) []Result
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) Result

// Deliver calls f.
func (f HandlerFunc) Deliver(ctx context.Context, d *Delivery) Result { return f(ctx, d) }
