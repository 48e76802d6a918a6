package dispatcher

import (
	"slices"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/dispatcher/headers"
)

// noValueRecord is, verbatim, what deadLettered writes when a dead letter is too large: until it
// becomes a builder of its own, the golden test takes it from here.
func noValueRecord(rec *kgo.Record) *kgo.Record {
	small := *rec
	small.Headers = append(slices.Clip(rec.Headers), hdr(headers.ValueOmitted, strconv.Itoa(len(rec.Value))))
	small.Value = nil
	return &small
}
