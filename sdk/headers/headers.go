// Package headers names every Kafka record header and HTTP header the retry-operator data plane
// reads or writes, in one place, so that the dispatcher, the library mode, the kubectl-dlq plugin
// and the operator agree on the spelling. It imports the standard library only.
//
// # Kafka headers on retry-tier and dead-letter records
//
// A record that failed keeps its original key, value and headers; the dispatcher adds the headers
// below, all starting with [Prefix]. Headers starting with [Prefix] that a record already carries
// are replaced, never duplicated. Times are RFC 3339 with nanoseconds in UTC ([FormatTime]), counts
// and offsets are base-10 integers.
//
//	header                         retry tier  dead letter  meaning
//	retryops.original.topic        yes         yes          topic the record was first consumed from
//	retryops.original.partition    yes         yes          its partition
//	retryops.original.offset       yes         yes          its offset
//	retryops.original.timestamp    yes         yes          its Kafka timestamp
//	retryops.source.timestamp      yes         no           timestamp the deadline is measured from
//	retryops.attempts              yes         yes          deliveries made so far
//	retryops.first.failure         yes         yes          time of the first failed delivery
//	retryops.last.failure          yes         yes          time of the last failed delivery
//	retryops.due                   yes         no           when the next delivery is due
//	retryops.error.type            yes         yes          error type of the last failure, at most MaxErrorTypeBytes
//	retryops.error.message         yes         yes          its message, at most MaxErrorMessageBytes
//	retryops.http.status           if any      if any       the sink's HTTP status of the last failure
//	retryops.rule                  if any      if any       classification rule that matched
//	retryops.reason                no          yes          why it was dead-lettered (see the Reason constants)
//	retryops.consumer.group        no          yes          consumer group of the pipeline
//	retryops.pipeline              yes         yes          pipeline, "<namespace>/<name>" (see below)
//	retryops.value.omitted         no          if needed    value size, when the value was too large to keep
//	retryops.replay.of             if replayed if replayed  the dead letter a replayed record replays ([ReplayOf])
//	retryops.replay.count          if replayed if replayed  how many times it has been replayed ([ReplayCount])
//
// The original coordinates survive retries and dead-letter replays: a replayed record carries the
// dead letter's retryops.original.* headers (and so keeps its idempotency key, [IdempotencyKey]),
// while its attempt count and its deadline start afresh. A replay is written to the pipeline's first
// retry tier with retryops.attempts "0" and the replay headers; [ReplayHeaders] builds them (see
// replay.go). A record on the source topic that carries retryops.original.* headers keeps them too,
// when all four are present and valid (the topic a valid topic name); otherwise they are ignored.
//
// A retry-tier record names the pipeline it belongs to in retryops.pipeline (a replay, the pipeline
// it is replayed into). A dispatcher dead-letters a tier record naming another pipeline with reason
// malformed, without delivering it: several pipelines may consume one source, and one pipeline's
// retries never reach another's sink. A tier record without the header is dead-lettered as
// undeliverable (MalformedRetryHeaders), as one without its attempt count or due time is.
package headers

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Prefix starts every header the data plane owns. Headers with this prefix are stripped from what a
// sink or a library handler sees and replaced on the records the dispatcher produces.
const Prefix = "retryops."

// Kafka record headers (see the package documentation for where each appears).
const (
	// OriginalTopic is the topic the record was first consumed from.
	OriginalTopic = "retryops.original.topic"
	// OriginalPartition is the partition the record was first consumed from.
	OriginalPartition = "retryops.original.partition"
	// OriginalOffset is the offset the record was first consumed at.
	OriginalOffset = "retryops.original.offset"
	// OriginalTimestamp is the Kafka timestamp of the original record.
	OriginalTimestamp = "retryops.original.timestamp"
	// SourceTimestamp is the timestamp of the record as consumed from the source topic: the start of
	// the policy's deadline. It differs from OriginalTimestamp only for replayed dead letters.
	SourceTimestamp = "retryops.source.timestamp"
	// Attempts is the number of deliveries made so far, the failed ones included. On a retry-tier
	// record the next delivery is attempt Attempts+1.
	Attempts = "retryops.attempts"
	// FirstFailure is the time of the first failed delivery (or of the dead-lettering, for a record
	// that was never delivered).
	FirstFailure = "retryops.first.failure"
	// LastFailure is the time of the last failed delivery.
	LastFailure = "retryops.last.failure"
	// Due is when a retry-tier record's next delivery is due.
	Due = "retryops.due"
	// ErrorType is the error type of the last failure: the type a library handler reported, the
	// transport error type (TimeoutError, ConnectionError), HTTP<status> for a sink status without
	// a type, or one of the dispatcher's own (see the ErrorType constants).
	ErrorType = "retryops.error.type"
	// ErrorMessage is the message of the last failure, cut at MaxErrorMessageBytes on a UTF-8
	// boundary.
	ErrorMessage = "retryops.error.message"
	// HTTPStatus is the sink's HTTP status code of the last failure, when it answered.
	HTTPStatus = "retryops.http.status"
	// Rule is the name of the classification rule that matched the last failure, when one did.
	Rule = "retryops.rule"
	// Reason says why a record was dead-lettered: one of the Reason constants.
	Reason = "retryops.reason"
	// ConsumerGroup is the consumer group of the pipeline that dead-lettered the record.
	ConsumerGroup = "retryops.consumer.group"
	// Pipeline is the pipeline a retry-tier record belongs to, or that dead-lettered the record, as
	// "<namespace>/<name>".
	Pipeline = "retryops.pipeline"
	// ValueOmitted is set (to the value's size in bytes) on a dead letter written without its value
	// because the dead letter topic rejected it as too large.
	ValueOmitted = "retryops.value.omitted"
	// KeyOmitted is set (to the key's size in bytes) on a dead letter written stripped: without its
	// key, value and user headers, because it could not be written whole.
	KeyOmitted = "retryops.key.omitted"
)

// The dead-letter reasons (values of the Reason header). They are spelled as the retry core's
// retry.Reason values, except ReasonMalformed, which only the dispatcher reports.
const (
	ReasonNonRetriable       = "non_retriable_error"
	ReasonMaxRetriesExceeded = "max_retries_exceeded"
	ReasonDeadlineExceeded   = "deadline_exceeded"
	ReasonUndeliverable      = "undeliverable"
	// ReasonMalformed: a retry-tier record's retryops.* headers are out of range (a pipeline other
	// than the one reading the tier, an attempt count outside 1..maxAttempts, a due time later than
	// any retry policy the API allows could schedule, an attempt count of 0 without the replay
	// headers, a replay header invalid, repeated or without the other, an original topic that is not
	// a valid topic name); the record is dead-lettered at once, without being delivered, and the
	// error message names the header.
	ReasonMalformed = "malformed"
)

// Error types the dispatcher itself reports (values of the ErrorType header).
const (
	// ErrorTypeRecordTooLarge: the record is larger than the configured maxRecordBytes.
	ErrorTypeRecordTooLarge = "RecordTooLarge"
	// ErrorTypePayloadTooLarge: the sink answered 413.
	ErrorTypePayloadTooLarge = "PayloadTooLarge"
	// ErrorTypeUnsupportedMediaType: the sink answered 415.
	ErrorTypeUnsupportedMediaType = "UnsupportedMediaType"
	// ErrorTypeMalformedHeaders: a retry-tier record's retryops.* headers could not be decoded.
	ErrorTypeMalformedHeaders = "MalformedRetryHeaders"
	// ErrorTypeOtherPipeline: a retry-tier record's retryops.pipeline names another pipeline than
	// the one reading the tier (misrouted or forged); it is dead-lettered with reason malformed,
	// its dead letter naming the pipeline that read it. A Replay without spec.target skips such a
	// dead letter (it would go to that pipeline's sink): only a target the action names replays it.
	ErrorTypeOtherPipeline = "OtherPipelineRecord"
	// ErrorTypeRetryProduceFailed: the record could not be written to its retry tier.
	ErrorTypeRetryProduceFailed = "RetryProduceFailed"
	// ErrorTypeDeadlineExceeded: the record was past its deadline before it was delivered.
	ErrorTypeDeadlineExceeded = "DeadlineExceeded"
	// ErrorTypePanic: processing the record panicked (in a library handler or the dispatcher); the
	// record is dead-lettered with reason undeliverable and the panic value as the message.
	ErrorTypePanic = "Panic"
	// ErrorTypeUndeliverable: a library handler reported the record as undeliverable.
	ErrorTypeUndeliverable = "Undeliverable"
	// ErrorTypeMaxAttemptsLowered: a retry-tier record had as many deliveries as the retry policy
	// now allows (its maxAttempts was lowered after the record was written) and carried no usable
	// error type of its own; it is dead-lettered with reason max_retries_exceeded.
	ErrorTypeMaxAttemptsLowered = "MaxAttemptsLowered"
)

// MaxErrorMessageBytes bounds the ErrorMessage header.
const MaxErrorMessageBytes = 1024

// MaxErrorTypeBytes bounds the ErrorType header (cut on a UTF-8 boundary): the API's bound on a
// dead letter's error type. The sink's Retryops-Error-Type, or a library handler's error type, may
// be longer (the HTTP sink reads up to 64 KiB of response headers); the policy's rules match the whole.
const MaxErrorTypeBytes = 317

// HTTP headers of the requests the dispatcher sends to a sink, and of its answers: their names.
// What each carries is the HTTP sink contract, docs/http-contract.md.
const (
	// HTTPIdempotencyKey carries IdempotencyKey of the original coordinates.
	HTTPIdempotencyKey = "Idempotency-Key"
	// HTTPRetryAttempt is the delivery attempt, 1 for the first delivery.
	HTTPRetryAttempt = "Retry-Attempt"
	// HTTPKafkaKey is the record key.
	HTTPKafkaKey = "Kafka-Key"
	// HTTPKafkaKeyEncoding says how HTTPKafkaKey is encoded.
	HTTPKafkaKeyEncoding = "Kafka-Key-Encoding"
	// HTTPKafkaHeaderPrefix precedes each record header's name (HeaderName).
	HTTPKafkaHeaderPrefix = "Kafka-Header-"
	// HTTPKafkaBase64Headers lists the Kafka-Header-* values sent in base64.
	HTTPKafkaBase64Headers = "Kafka-Base64-Headers"
	// HTTPKafkaTopic, HTTPKafkaPartition, HTTPKafkaOffset and HTTPKafkaTimestamp are the record's
	// original coordinates.
	HTTPKafkaTopic     = "Kafka-Topic"
	HTTPKafkaPartition = "Kafka-Partition"
	HTTPKafkaOffset    = "Kafka-Offset"
	HTTPKafkaTimestamp = "Kafka-Timestamp"
	// HTTPDeliveredFrom names the record actually consumed.
	HTTPDeliveredFrom = "Retryops-Delivered-From"
	// HTTPErrorType is a response header: the sink's error type of a failure.
	HTTPErrorType = "Retryops-Error-Type"
	// HTTPRetryAfter is the standard response header.
	HTTPRetryAfter = "Retry-After"
)

// IdempotencyKey is the stable id of a record: "<topic>/<partition>/<offset>" of the original
// record. Topic names cannot contain '/', so the key is unambiguous.
func IdempotencyKey(topic string, partition int32, offset int64) string {
	var b strings.Builder
	b.Grow(len(topic) + 24)
	b.WriteString(topic)
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(int64(partition), 10))
	b.WriteByte('/')
	b.WriteString(strconv.FormatInt(offset, 10))
	return b.String()
}

// FormatTime formats t as the headers carry times: RFC 3339 with nanoseconds, in UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseTime parses a time written by FormatTime (any RFC 3339 time).
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }

// TruncateMessage cuts s to at most MaxErrorMessageBytes bytes on a UTF-8 boundary.
func TruncateMessage(s string) string { return truncate(s, MaxErrorMessageBytes) }

// TruncateErrorType cuts s to at most MaxErrorTypeBytes bytes on a UTF-8 boundary.
func TruncateErrorType(s string) string { return truncate(s, MaxErrorTypeBytes) }

// truncate cuts s to at most n bytes on a UTF-8 boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// IsOwned reports whether a header name belongs to the data plane (starts with Prefix).
func IsOwned(name string) bool { return strings.HasPrefix(name, Prefix) }

// HeaderName encodes a Kafka header name into the HTTP header name Kafka-Header-<name>: bytes that
// are not HTTP token characters, and '%', are percent-encoded (%XX, upper case), so the mapping is
// reversible with DecodeHeaderName. Case is kept as given, though HTTP header names are
// case-insensitive.
func HeaderName(kafkaName string) string {
	clean := true
	for i := range len(kafkaName) {
		if !isTokenChar(kafkaName[i]) || kafkaName[i] == '%' {
			clean = false
			break
		}
	}
	if clean {
		return HTTPKafkaHeaderPrefix + kafkaName
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(HTTPKafkaHeaderPrefix) + 3*len(kafkaName))
	b.WriteString(HTTPKafkaHeaderPrefix)
	for i := range len(kafkaName) {
		c := kafkaName[i]
		if isTokenChar(c) && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// DecodeHeaderName reverses HeaderName for the part after HTTPKafkaHeaderPrefix.
func DecodeHeaderName(encoded string) (string, bool) {
	if !strings.Contains(encoded, "%") {
		return encoded, true
	}
	out := make([]byte, 0, len(encoded))
	for i := 0; i < len(encoded); i++ {
		if encoded[i] != '%' {
			out = append(out, encoded[i])
			continue
		}
		if i+2 >= len(encoded) {
			return "", false
		}
		v, err := strconv.ParseUint(encoded[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		out = append(out, byte(v))
		i += 2
	}
	return string(out), true
}

// IsPlainHeaderValue reports whether v can be sent as an HTTP header value as is: valid UTF-8
// without control characters (tab allowed) and without leading or trailing blanks, which HTTP
// would strip.
func IsPlainHeaderValue(v []byte) bool {
	if len(v) == 0 {
		return true
	}
	if v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t' {
		return false
	}
	for i := 0; i < len(v); {
		c := v[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return false
			}
			i++
			continue
		}
		r, w := utf8.DecodeRune(v[i:])
		if r == utf8.RuneError && w <= 1 {
			return false
		}
		i += w
	}
	return true
}

// isTokenChar reports whether c is an RFC 9110 token character.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
