package dispatcher

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retry"
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
	fetched      time.Time // when it was consumed

	replayOf    string // a replayed dead letter's headers.ReplayOf, carried forward; "" when not replayed
	replayCount int    // and its headers.ReplayCount
	// replayWrite is set on a Replay's own record (0 attempts on a tier): due when written, its
	// timestamp is not the start of a delay, so it says nothing of when the records behind it are due.
	replayWrite bool

	batchSize int64 // what it puts in a batch (batchRecordSize), once sized; 0 before
	heapIdx   int   // its index in its retry tier's dueHeap while queued there
	repark    bool  // started to be written again to the tail of its tier (repark.go), not delivered

	size    int64        // bytes of key, value and headers as consumed (the look-ahead window's measure)
	pre     *failure     // non-nil: dead-letter without delivering
	allowed bool         // the breaker admitted the delivery, until recordPermit or releasePermit
	permit  retry.Permit // what the breaker admitted, for releasePermit

	fate fate     // set by settle alone
	dlq  dlqState // the dead letter being written: failed tries and what it gave up (deadletter.go)

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

// headerOverhead is what a record header costs beyond its name and value, in the size measured
// against maxRecordBytes: the HTTP sink sends it as "Kafka-Header-<name>: <value>\r\n". So
// maxRecordBytes bounds the number of headers too, and with it the memory of a delivery (an empty
// header is 2 bytes in Kafka, but some 300 in a built HTTP request).
const headerOverhead = int64(len(headers.HTTPKafkaHeaderPrefix) + len(": \r\n"))

// maxClockSkew is the tolerance of the due-time bound for clocks of dispatcher replicas that differ.
// The bound itself is the API's, not the current policy's: a retry any policy the API accepts
// could have scheduled (retry.MaxScheduleDelay ahead at most) is delivered when due, so that a
// policy edit never dead-letters the records an earlier policy left waiting. The policies a
// pipeline had are not known here (nor kept across a resource re-created under the same name);
// the cost of the looser bound is only that a forged record of the pipeline's own tier, due within
// it, waits instead of being dead-lettered at once, and a long wait holds nothing up (repark.go).
const maxClockSkew = time.Minute

// newItem parses a record consumed from partition ps at time now. s bounds the size of what is
// delivered (key, value and the headers other than retryops.*, each with headerOverhead) and the values of its retryops.* headers, which are untrusted input. A timestamp before
// 1970 (-1 from old producers) starts the deadline at now, when the record is first seen.
func newItem(r *kgo.Record, ps *partState, s *settings, now time.Time) *item {
	maxBytes := s.maxRecordBytes
	it := &item{rec: r, view: r, part: ps, attempt: 1, srcTime: r.Timestamp, fetched: now}
	size := int64(len(r.Key) + len(r.Value))
	owned := false
	var ownBytes int64
	for i := range r.Headers {
		hb := int64(len(r.Headers[i].Key) + len(r.Headers[i].Value))
		if headers.IsOwned(r.Headers[i].Key) {
			owned = true
			ownBytes += hb
			continue // the dispatcher's own headers are not delivered: not counted against maxBytes
		}
		size += hb + headerOverhead
	}
	it.size = size + ownBytes
	if owned {
		it.parse(ps.tier, s, now)
	} else if ps.tier > 0 {
		it.pre = &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypeMalformedHeaders,
			message: "retry-tier record without retryops headers"}
	}
	if it.srcTime.Before(time.UnixMilli(0)) {
		it.srcTime = now
	}
	if it.pre == nil && size > maxBytes {
		msg := "record of " + strconv.FormatInt(size, 10) + " bytes exceeds maxRecordBytes " + strconv.FormatInt(maxBytes, 10)
		if n := len(it.view.Headers); n > 0 {
			msg += " (its " + strconv.Itoa(n) + " headers count " + strconv.FormatInt(headerOverhead, 10) + " bytes each beyond name and value)"
		}
		it.pre = &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypeRecordTooLarge, message: msg}
	}
	return it
}

// parse reads the retryops.* headers and builds the view without them. On a retry tier (tier > 0)
// every retry header must decode, and the attempt count (1..maxAttempts, or 0 for a replayed dead
// letter) and the due time (from 1970 to retry.MaxScheduleDelay after now, plus maxClockSkew) must
// be in range. The replay headers (headers.ReplayOf and headers.ReplayCount) come together or not at
// all, each at most once and valid; a tier record with 0 attempts must have them, and is then a
// fresh first delivery: attempt 1, no first failure, its deadline counted from its due time (the
// replay time). A retryops.original.topic that is not a valid topic name is malformed on a tier. On
// the source topic only complete and valid original coordinates and valid replay headers are kept
// (anything else is ignored), and the attempt count and deadline start afresh. A tier record whose
// retryops.pipeline is not this pipeline's (s.pipelineID) is malformed whatever else it carries,
// with error type headers.ErrorTypeOtherPipeline: another pipeline's record (misrouted or forged)
// is never delivered to this one's sink; a tier record without it is undeliverable, as one without
// its attempt count or due time is.
func (it *item) parse(tier int, s *settings, now time.Time) {
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
		bad, malformed, attemptsRaw  string
		dueRaw, lastType, topicBad   string
		pipelineBad                  string
		havePart, haveOff, havePipe  bool
		replay                       replayHeaders
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
			// It becomes the delivery's Kafka-Topic and Idempotency-Key: a valid topic name only.
			oTopic, haveTopic = v, headers.ValidTopicName(v)
			if !haveTopic && topicBad == "" {
				topicBad = headers.OriginalTopic + " " + quoteBounded(v) + " is not a valid topic name"
			}
		case headers.OriginalPartition:
			oPart, err = strconv.ParseInt(v, 10, 32)
			havePart = err == nil
		case headers.OriginalOffset:
			oOff, err = strconv.ParseInt(v, 10, 64)
			haveOff = err == nil
		case headers.OriginalTimestamp:
			oTime, err = headers.ParseTime(v)
			haveTime = err == nil
		case headers.SourceTimestamp:
			srcTime, err = headers.ParseTime(v)
			haveSrc = err == nil
		case headers.Attempts:
			attempts, err = strconv.ParseInt(v, 10, 32)
			attemptsRaw = v
		case headers.FirstFailure:
			first, err = headers.ParseTime(v)
		case headers.Due:
			due, err = headers.ParseTime(v)
			dueRaw = v
		case headers.ErrorType:
			lastType = v
		case headers.Pipeline:
			havePipe = true
			if v != s.pipelineID && pipelineBad == "" {
				pipelineBad = headers.Pipeline + " " + quoteBounded(v) + " is not this pipeline (" + s.pipelineID +
					"): a record of another pipeline's retry tier"
			}
		case headers.ReplayOf, headers.ReplayCount:
			replay.add(h.Key, v)
		}
		if err != nil && bad == "" {
			bad = h.Key + ": " + err.Error()
		}
	}
	origOK := haveTopic && havePart && haveOff && oPart >= 0 && oOff >= 0 && haveTime
	if origOK {
		view.Topic, view.Partition, view.Offset, view.Timestamp = oTopic, int32(oPart), oOff, oTime
	}
	it.view = &view
	replayBad := replay.check()
	if replay.of != "" {
		it.replayOf, it.replayCount = replay.of, replay.count
	}
	if tier == 0 {
		return // fresh attempts and deadline, original coordinates when complete
	}
	switch {
	case pipelineBad != "":
		malformed = pipelineBad
	case replayBad != "":
		malformed = replayBad
	case bad != "":
	case topicBad != "":
		malformed = topicBad
	case !origOK:
		bad = "incomplete retryops.original.* headers"
	case attempts == -1 && attemptsRaw == "":
		bad = "missing " + headers.Attempts
	case attempts == 0 && it.replayOf == "":
		malformed = headers.Attempts + " \"0\" without " + headers.ReplayOf + " and " + headers.ReplayCount +
			": only a replayed dead letter starts from 0 deliveries"
	case attempts < 0 || attempts > maxAttemptsHeader:
		malformed = headers.Attempts + " " + quoteBounded(attemptsRaw) + " out of range 1.." + strconv.Itoa(maxAttemptsHeader)
	case dueRaw == "":
		bad = "missing " + headers.Due
	case due.Before(time.UnixMilli(0)):
		malformed = headers.Due + " " + quoteBounded(dueRaw) + " before 1970: no retry policy schedules it"
	case due.After(now.Add(retry.MaxScheduleDelay + maxClockSkew)):
		malformed = headers.Due + " " + quoteBounded(dueRaw) + " later than any retry policy schedules a retry (" +
			retry.MaxScheduleDelay.String() + ") after " + headers.FormatTime(now)
	case !havePipe:
		bad = "missing " + headers.Pipeline
	}
	if malformed != "" {
		et := headers.ErrorTypeMalformedHeaders
		if pipelineBad != "" {
			// Its dead letter names this pipeline (the header is untrusted); the error type tells
			// a Replay without a target not to send it here.
			et = headers.ErrorTypeOtherPipeline
		}
		it.pre = &failure{reason: headers.ReasonMalformed, errorType: et, message: malformed}
		return
	}
	if bad != "" {
		it.pre = &failure{reason: headers.ReasonUndeliverable, errorType: headers.ErrorTypeMalformedHeaders, message: bad}
		return
	}
	if attempts == 0 { // a replayed dead letter: a fresh first delivery from the replay time on
		it.attempt, it.due, it.srcTime, it.replayWrite = 1, due, due, true
		return
	}
	it.attempt = int32(attempts) + 1
	if int32(attempts) >= s.maxAttempts() {
		// Written under a policy that allowed more deliveries (its maxAttempts was lowered since).
		et := lastType
		if et == "" || len(et) > maxQuoted || !utf8.ValidString(et) {
			et = headers.ErrorTypeMaxAttemptsLowered
		}
		it.pre = &failure{reason: headers.ReasonMaxRetriesExceeded, errorType: et, message: "the record had " + strconv.FormatInt(attempts, 10) +
			" deliveries; the retry policy now allows " + strconv.Itoa(int(s.maxAttempts()))}
	}
	it.due = due
	it.firstFailure = first
	if haveSrc {
		it.srcTime = srcTime
	} else {
		it.srcTime = oTime
	}
}

// replayHeaders collects a record's replay headers (untrusted).
type replayHeaders struct {
	of, bad       string // of: the valid ReplayOf, once check found nothing wrong
	count         int
	nOf, nCount   int
	ofRaw, cntRaw string
}

// add reads one replay header, keeping the first problem found.
func (r *replayHeaders) add(key, v string) {
	var err error
	if key == headers.ReplayOf {
		r.nOf++
		r.ofRaw = v
		_, _, _, err = headers.ParseReplayOf(v)
	} else {
		r.nCount++
		r.cntRaw = v
		r.count, err = headers.ParseReplayCount(v)
	}
	if err != nil && r.bad == "" {
		r.bad = key + " " + quoteBounded(v) + ": " + err.Error()
	}
}

// check says what is wrong with the replay headers, "" when nothing is (both valid, or neither
// present). Only then is r.of the replay's headers.ReplayOf ("" when none).
func (r *replayHeaders) check() string {
	switch {
	case r.bad != "":
	case r.nOf > 1:
		r.bad = headers.ReplayOf + " repeated"
	case r.nCount > 1:
		r.bad = headers.ReplayCount + " repeated"
	case r.nOf == 1 && r.nCount == 0:
		r.bad = headers.ReplayOf + " " + quoteBounded(r.ofRaw) + " without " + headers.ReplayCount
	case r.nOf == 0 && r.nCount == 1:
		r.bad = headers.ReplayCount + " " + quoteBounded(r.cntRaw) + " without " + headers.ReplayOf
	}
	if r.bad == "" {
		r.of = r.ofRaw
	}
	return r.bad
}

// dueKey is when the record may start: its due time, or at once (zero) for a record to
// dead-letter without delivery.
func (it *item) dueKey() time.Time {
	if it.pre != nil {
		return time.Time{}
	}
	return it.due
}

// idempotencyKey is the record's stable id from its original coordinates.
func (it *item) idempotencyKey() string {
	return headers.IdempotencyKey(it.view.Topic, it.view.Partition, it.view.Offset)
}

// maxAttemptsHeader bounds retryops.attempts: the API's limit on maxAttempts. A count above the
// current policy's maxAttempts but within it comes from a policy that allowed more deliveries.
const maxAttemptsHeader = 100

// maxQuoted bounds the length of a header value quoted in an error message.
const maxQuoted = 64

// quoteBounded quotes an untrusted header value for an error message, cut to maxQuoted bytes.
func quoteBounded(v string) string {
	if len(v) > maxQuoted {
		return strconv.QuoteToASCII(v[:maxQuoted]) + "..."
	}
	return strconv.QuoteToASCII(v)
}
