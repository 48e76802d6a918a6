package retryloop_test

import (
	"context"
	"errors"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/retryloop"
)

// saveAll stands for a bulk write that reports an error per row (nil for a row written).
func saveAll(_ context.Context, rows [][]byte, keys []string) []error {
	return make([]error, len(rows))
}

// errInvalid stands for an error of the user's that no retry can fix.
var errInvalid = errors.New("invalid row")

// A batch handler writes a batch in one bulk call and reports an error per record; each record
// then gets the fate it would get alone (retried through the tiers, or dead-lettered).
func ExampleNewBatch() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	loop, err := retryloop.NewBatch(nil, func(ctx context.Context, records []*kgo.Record) []error {
		rows := make([][]byte, len(records))
		keys := make([]string, len(records))
		for i, r := range records {
			info, _ := retryloop.BatchInfo(ctx, i)
			rows[i], keys[i] = r.Value, info.IdempotencyKey // stable across retries: an upsert key
		}
		errs := saveAll(ctx, rows, keys)
		for i, err := range errs {
			if errors.Is(err, errInvalid) {
				errs[i] = retryloop.Permanent(err) // straight to the dead letter queue
			}
		}
		return errs // one per record: a record without one fails as BatchResultMissing
	})
	if err != nil {
		return
	}
	_ = loop.Run(ctx) // until SIGTERM, then a graceful stop
}
