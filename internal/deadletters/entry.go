package deadletters

import (
	"bytes"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// Bounds of what an Entry keeps of the context headers, which anyone who can write to the topic
// controls: a longer value is cut (on a UTF-8 boundary), invalid UTF-8 is replaced.
const (
	// MaxNameBytes bounds Reason, ErrorType and Pipeline (the API's DeadLetterName).
	MaxNameBytes = 317
	// MaxGroupBytes bounds ConsumerGroup.
	MaxGroupBytes = 255
	// MaxMessageBytes bounds ErrorMessage (the dispatcher writes at most as much).
	MaxMessageBytes = headers.MaxErrorMessageBytes
	// MaxRuleBytes bounds Rule.
	MaxRuleBytes = 253
)

// ID names a dead letter: its partition and offset in the dead letter topic.
type ID struct {
	Partition int32
	Offset    int64
}

// String formats id as "<partition>/<offset>", the state topic's key and the API's RecordRef.
func (id ID) String() string {
	return strconv.FormatInt(int64(id.Partition), 10) + "/" + strconv.FormatInt(id.Offset, 10)
}

// ParseID parses "<partition>/<offset>" (base 10, no sign, no leading zeros, partition within
// int32, offset within int64).
func ParseID(s string) (ID, bool) {
	ps, os, ok := strings.Cut(s, "/")
	if !ok || len(s) > 30 {
		return ID{}, false
	}
	p, ok1 := canonical(ps, 31)
	o, ok2 := canonical(os, 63)
	if !ok1 || !ok2 {
		return ID{}, false
	}
	return ID{Partition: int32(p), Offset: o}, true
}

func canonical(s string, bits int) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, bits+1)
	if err != nil || n < 0 || (bits == 31 && n > 1<<31-1) {
		return 0, false
	}
	return n, true
}

// Entry is one dead letter as read from the dead letter topic: its coordinates, its dead-lettering
// time, what its context headers say (bounded, see the Max constants; zero when absent or invalid)
// and the record itself (key, value and every header, copied: an Entry outlives the scan).
type Entry struct {
	ID
	// Time is when the record was dead-lettered: its Kafka timestamp.
	Time time.Time
	// Reason is why it was dead-lettered (headers.Reason*).
	Reason string
	// ErrorType, ErrorMessage, HTTPStatus (0 when none) and Rule describe the last failure.
	ErrorType    string
	ErrorMessage string
	HTTPStatus   int
	Rule         string
	// Pipeline is "<namespace>/<name>" of the pipeline that dead-lettered it; ConsumerGroup its group.
	Pipeline      string
	ConsumerGroup string
	// Attempts is the number of deliveries made (0 when absent or invalid).
	Attempts int
	// FirstFailure and LastFailure are the times of the first and last failed delivery.
	FirstFailure, LastFailure time.Time
	// OriginalTopic, OriginalPartition, OriginalOffset and OriginalTimestamp are where the record was
	// first consumed from; HasOriginal says whether all four were present and valid.
	OriginalTopic     string
	OriginalPartition int32
	OriginalOffset    int64
	OriginalTimestamp time.Time
	HasOriginal       bool
	// ReplayOf names the dead letter this one's record replayed ("<topic>/<partition>/<offset>"), and
	// ReplayCount how many times it had been replayed (0 when never, or when the header is invalid:
	// ReplayCountValid says so).
	ReplayOf         string
	ReplayCount      int
	ReplayCountValid bool
	// Key, Value and Headers are the record's, in order (retryops.* headers included).
	Key, Value []byte
	Headers    []kafka.Header
}

// ParseEntry reads a dead letter from a record of the dead letter topic. It never fails: a missing or
// invalid context header leaves its field zero, a too long one is cut. Repeated headers: the last
// one counts, as the dispatcher reads them. It copies everything it keeps from r.
func ParseEntry(r kafka.Record) Entry { return parse(r, true) }

// parse is ParseEntry; without copy, Key, Value and the header values share r's bytes.
func parse(r kafka.Record, copy bool) Entry {
	clone := cloneBytes
	if !copy {
		clone = func(b []byte) []byte { return b }
	}
	e := Entry{
		ID:                ID{Partition: r.Partition, Offset: r.Offset},
		Time:              r.Timestamp,
		Key:               clone(r.Key),
		Value:             clone(r.Value),
		OriginalPartition: -1,
		OriginalOffset:    -1,
		ReplayCountValid:  true,
	}
	if len(r.Headers) > 0 {
		e.Headers = make([]kafka.Header, len(r.Headers))
	}
	var origOK [4]bool
	for i, h := range r.Headers {
		e.Headers[i] = kafka.Header{Key: h.Key, Value: clone(h.Value)}
		if !headers.IsOwned(h.Key) {
			continue
		}
		v := h.Value
		switch h.Key {
		case headers.Reason:
			e.Reason = text(v, MaxNameBytes)
		case headers.ErrorType:
			e.ErrorType = text(v, MaxNameBytes)
		case headers.ErrorMessage:
			e.ErrorMessage = text(v, MaxMessageBytes)
		case headers.HTTPStatus:
			e.HTTPStatus = 0
			if n, ok := canonical(string(bounded(v, 3)), 31); ok && n >= 100 && n <= 599 && len(v) == 3 {
				e.HTTPStatus = int(n)
			}
		case headers.Rule:
			e.Rule = text(v, MaxRuleBytes)
		case headers.Pipeline:
			e.Pipeline = text(v, MaxNameBytes)
		case headers.ConsumerGroup:
			e.ConsumerGroup = text(v, MaxGroupBytes)
		case headers.Attempts:
			e.Attempts = 0
			if n, ok := canonical(string(bounded(v, 10)), 31); ok && len(v) <= 10 {
				e.Attempts = int(n)
			}
		case headers.FirstFailure:
			e.FirstFailure = parseTime(v)
		case headers.LastFailure:
			e.LastFailure = parseTime(v)
		case headers.OriginalTopic:
			e.OriginalTopic, origOK[0] = "", false
			if headers.ValidTopicName(string(bounded(v, headers.MaxTopicNameBytes+1))) {
				e.OriginalTopic, origOK[0] = string(v), true
			}
		case headers.OriginalPartition:
			n, ok := canonical(string(bounded(v, 11)), 31)
			origOK[1] = ok && len(v) <= 11
			e.OriginalPartition = int32(n)
		case headers.OriginalOffset:
			n, ok := canonical(string(bounded(v, 20)), 63)
			origOK[2] = ok && len(v) <= 20
			e.OriginalOffset = n
		case headers.OriginalTimestamp:
			e.OriginalTimestamp = parseTime(v)
			origOK[3] = !e.OriginalTimestamp.IsZero()
		case headers.ReplayOf:
			e.ReplayOf = ""
			if _, _, _, err := headers.ParseReplayOf(string(bounded(v, headers.MaxReplayOfBytes+1))); err == nil {
				e.ReplayOf = string(v)
			}
		}
	}
	e.HasOriginal = origOK[0] && origOK[1] && origOK[2] && origOK[3]
	if !origOK[1] {
		e.OriginalPartition = -1
	}
	if !origOK[2] {
		e.OriginalOffset = -1
	}
	if n, err := headers.ReplayCountOf(replayHeaders(r.Headers)); err == nil {
		e.ReplayCount = n
	} else {
		e.ReplayCountValid = false
	}
	return e
}

// replayHeaders converts the headers for headers.ReplayCountOf, keeping only ReplayCount ones.
func replayHeaders(hs []kafka.Header) []headers.Header {
	var out []headers.Header
	for _, h := range hs {
		if h.Key == headers.ReplayCount {
			out = append(out, headers.Header{Key: h.Key, Value: bounded(h.Value, 8)})
		}
	}
	return out
}

// Header returns the value of the last header named name, and whether there is one.
func (e *Entry) Header(name string) ([]byte, bool) {
	for i := len(e.Headers) - 1; i >= 0; i-- {
		if e.Headers[i].Key == name {
			return e.Headers[i].Value, true
		}
	}
	return nil, false
}

// PipelineRef splits Pipeline into namespace and name; ok is false unless it has that form.
func (e *Entry) PipelineRef() (namespace, name string, ok bool) {
	ns, n, found := strings.Cut(e.Pipeline, "/")
	if !found || ns == "" || n == "" || strings.Contains(n, "/") {
		return "", "", false
	}
	return ns, n, true
}

// OtherPipelineRecord reports whether e is the dispatcher's refusal of a record of another
// pipeline's retry tier (reason malformed, error type headers.ErrorTypeOtherPipeline). Its
// Pipeline is the pipeline that refused the record, not one the record belongs to; an error type
// alone, which a sink or a library handler may choose, is not the dispatcher's word.
func (e *Entry) OtherPipelineRecord() bool {
	return e.Reason == headers.ReasonMalformed && e.ErrorType == headers.ErrorTypeOtherPipeline
}

// text is v as a string of at most limit bytes: cut on a UTF-8 boundary, invalid UTF-8 replaced.
func text(v []byte, limit int) string {
	v = bounded(v, limit)
	if utf8.Valid(v) {
		return string(v)
	}
	return cutString(strings.ToValidUTF8(string(v), "\uFFFD"), limit)
}

// cutString cuts s to at most limit bytes on a UTF-8 boundary.
func cutString(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	c := limit
	for c > 0 && !utf8.RuneStart(s[c]) {
		c--
	}
	return s[:c]
}

// bounded cuts v to at most limit bytes, backing up to the start of a cut UTF-8 sequence.
func bounded(v []byte, limit int) []byte {
	if len(v) <= limit {
		return v
	}
	c := limit
	for c > 0 && limit-c < utf8.UTFMax && !utf8.RuneStart(v[c]) {
		c--
	}
	if !utf8.RuneStart(v[c]) {
		c = limit
	}
	return v[:c]
}

func parseTime(v []byte) time.Time {
	if len(v) > 64 {
		return time.Time{}
	}
	t, err := headers.ParseTime(string(v))
	if err != nil {
		return time.Time{}
	}
	return t.UTC()
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return bytes.Clone(b)
}
