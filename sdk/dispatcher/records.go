package dispatcher

import (
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
)

// The records the dispatcher writes after a failure, built from the item alone: no client, no
// clock, no lock. Their golden files are in testdata/ (records_test.go).

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

// retryRecord is the record written to a retry tier after delivery number it.attempt failed. It
// names its pipeline, whose dispatcher alone delivers it (record.go's parse).
func (it *item) retryRecord(topic, pipeline string, f *failure, due time.Time) *kgo.Record {
	hs := it.outHeaders(11)
	hs = append(hs, hdr(headers.Pipeline, pipeline), hdr(headers.SourceTimestamp, headers.FormatTime(it.srcTime)))
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

// noValueRecord is a dead letter without its value, which the topic rejected as too large: key,
// headers and context kept, the value's size in headers.ValueOmitted.
func noValueRecord(rec *kgo.Record) *kgo.Record {
	small := *rec
	small.Headers = append(slices.Clip(rec.Headers), hdr(headers.ValueOmitted, strconv.Itoa(len(rec.Value))))
	small.Value = nil
	return &small
}

// strippedRecord is a dead letter reduced to its retryops.* headers, with the key's and value's
// sizes: what is left to write when the whole record cannot be.
func (it *item) strippedRecord(rec *kgo.Record) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+2)
	for _, h := range rec.Headers {
		if headers.IsOwned(h.Key) && h.Key != headers.ValueOmitted && h.Key != headers.KeyOmitted {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		hdr(headers.KeyOmitted, strconv.Itoa(len(it.view.Key))),
		hdr(headers.ValueOmitted, strconv.Itoa(len(it.view.Value))))
	return &kgo.Record{Topic: rec.Topic, Headers: hs}
}
