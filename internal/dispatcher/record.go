package dispatcher

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/dispatcher/headers"
)

// item is one consumed record on its way through the dispatcher.
type item struct {
	rec  *kgo.Record // as consumed
	view *kgo.Record // as delivered: original coordinates, own headers only
	part *partState

	attempt      int32     // this delivery's number, 1-based
	due          time.Time // when it may be delivered; zero: at once
	srcTime      time.Time // start of the deadline
	firstFailure time.Time // zero before the first failure

	pre     *failure // non-nil: dead-letter without delivering
	allowed bool     // the breaker admitted the delivery: exactly one Record follows

	done      bool // finished: its offset may be committed
	abandoned bool // given up during a stop or revocation: never committed

	d Delivery // what the handler gets, kept here to save an allocation
}

// failure describes why a record is retried or dead-lettered.
type failure struct {
	reason     string // dead-letter reason, "" for a retry
	errorType  string
	message    string
	httpStatus int
	rule       string
	at         time.Time
}

// newItem parses a consumed record. tier is false for the source topic. maxBytes bounds the record
// size delivered.
func newItem(r *kgo.Record, ps *partState, maxBytes int64) *item {
	it := &item{rec: r, view: r, part: ps, attempt: 1, srcTime: r.Timestamp}
	size := int64(len(r.Key) + len(r.Value))
	owned := false
	for i := range r.Headers {
		size += int64(len(r.Headers[i].Key) + len(r.Headers[i].Value))
		if headers.IsOwned(r.Headers[i].Key) {
			owned = true
		}
	}
	if owned {
		it.parse(ps.tier > 0)
	} else if ps.tier > 0 {
		it.pre = &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypeMalformedHeaders,
			message: "retry-tier record without retryops headers"}
	}
	if it.pre == nil && size > maxBytes {
		it.pre = &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypeRecordTooLarge,
			message: "record of " + strconv.FormatInt(size, 10) + " bytes exceeds maxRecordBytes " + strconv.FormatInt(maxBytes, 10)}
	}
	return it
}

// parse reads the retryops.* headers and builds the view without them. On a retry tier every
// retry header must decode; on the source topic (a replayed dead letter) only complete original
// coordinates are kept, and the attempt count and deadline start afresh.
func (it *item) parse(tier bool) {
	r := it.rec
	view := *r
	view.Headers = make([]kgo.RecordHeader, 0, len(r.Headers))
	var (
		oTopic                       string
		oPart                        int64 = -1
		oOff                         int64 = -1
		oTime, srcTime, first, due   time.Time
		attempts                     int64 = -1
		haveTopic, haveTime, haveSrc bool
		bad                          string
	)
	for _, h := range r.Headers {
		if !headers.IsOwned(h.Key) {
			view.Headers = append(view.Headers, h)
			continue
		}
		v := string(h.Value)
		var err error
		switch h.Key {
		case headers.OriginalTopic:
			oTopic, haveTopic = v, v != ""
		case headers.OriginalPartition:
			oPart, err = strconv.ParseInt(v, 10, 32)
		case headers.OriginalOffset:
			oOff, err = strconv.ParseInt(v, 10, 64)
		case headers.OriginalTimestamp:
			oTime, err = headers.ParseTime(v)
			haveTime = err == nil
		case headers.SourceTimestamp:
			srcTime, err = headers.ParseTime(v)
			haveSrc = err == nil
		case headers.Attempts:
			attempts, err = strconv.ParseInt(v, 10, 32)
		case headers.FirstFailure:
			first, err = headers.ParseTime(v)
		case headers.Due:
			due, err = headers.ParseTime(v)
		}
		if err != nil && bad == "" {
			bad = h.Key + ": " + err.Error()
		}
	}
	origOK := haveTopic && oPart >= 0 && oOff >= 0 && haveTime
	if origOK {
		view.Topic, view.Partition, view.Offset, view.Timestamp = oTopic, int32(oPart), oOff, oTime
	}
	it.view = &view
	if !tier {
		return // a replay: fresh attempts and deadline, original coordinates when complete
	}
	switch {
	case bad != "":
	case !origOK:
		bad = "incomplete retryops.original.* headers"
	case attempts < 1:
		bad = "missing or invalid " + headers.Attempts
	case due.IsZero():
		bad = "missing " + headers.Due
	}
	if bad != "" {
		it.pre = &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypeMalformedHeaders, message: bad}
		return
	}
	it.attempt = int32(attempts) + 1
	it.due = due
	it.firstFailure = first
	if haveSrc {
		it.srcTime = srcTime
	} else {
		it.srcTime = oTime
	}
}

// idempotencyKey is the record's stable id from its original coordinates.
func (it *item) idempotencyKey() string {
	return headers.IdempotencyKey(it.view.Topic, it.view.Partition, it.view.Offset)
}

func hdr(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// originHeaders appends the original coordinates.
func (it *item) originHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	v := it.view
	return append(hs,
		hdr(headers.OriginalTopic, v.Topic),
		hdr(headers.OriginalPartition, strconv.FormatInt(int64(v.Partition), 10)),
		hdr(headers.OriginalOffset, strconv.FormatInt(v.Offset, 10)),
		hdr(headers.OriginalTimestamp, headers.FormatTime(v.Timestamp)),
	)
}

// failureHeaders appends the failure context shared by retry and dead-letter records.
func failureHeaders(hs []kgo.RecordHeader, attempts int32, first time.Time, f *failure) []kgo.RecordHeader {
	hs = append(hs,
		hdr(headers.Attempts, strconv.FormatInt(int64(attempts), 10)),
		hdr(headers.FirstFailure, headers.FormatTime(first)),
		hdr(headers.LastFailure, headers.FormatTime(f.at)),
		hdr(headers.ErrorType, f.errorType),
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
	first := it.firstFailure
	if first.IsZero() {
		first = f.at
	}
	hs := make([]kgo.RecordHeader, 0, len(it.view.Headers)+14)
	hs = append(hs, it.view.Headers...)
	hs = it.originHeaders(hs)
	hs = append(hs, hdr(headers.SourceTimestamp, headers.FormatTime(it.srcTime)))
	hs = failureHeaders(hs, it.attempt, first, f)
	hs = append(hs, hdr(headers.Due, headers.FormatTime(due)))
	return &kgo.Record{Topic: topic, Key: it.view.Key, Value: it.view.Value, Headers: hs}
}

// deadLetterRecord is the record written to the dead letter topic. attempts is the number of
// deliveries made.
func (it *item) deadLetterRecord(topic, group, pipeline string, attempts int32, f *failure) *kgo.Record {
	first := it.firstFailure
	if first.IsZero() {
		first = f.at
	}
	hs := make([]kgo.RecordHeader, 0, len(it.view.Headers)+16)
	hs = append(hs, it.view.Headers...)
	hs = it.originHeaders(hs)
	hs = append(hs, hdr(headers.ConsumerGroup, group), hdr(headers.Pipeline, pipeline))
	hs = failureHeaders(hs, attempts, first, f)
	hs = append(hs, hdr(headers.Reason, f.reason))
	return &kgo.Record{Topic: topic, Key: it.view.Key, Value: it.view.Value, Headers: hs}
}
