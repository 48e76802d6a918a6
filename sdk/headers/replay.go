package headers

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// Dead-letter replay: the record that replays a dead letter is written to the pipeline's first
// retry tier (which only that pipeline's consumer group reads) with the dead letter's key, value and
// headers not starting with [Prefix] (the original record's own headers), plus the headers
// [ReplayHeaders] builds:
//
//	retryops.replay.of             "<dlq topic>/<partition>/<offset>" of the dead letter replayed ([FormatReplayOf])
//	retryops.replay.count          how many times the record has been replayed, this one included: 1..MaxReplayCount
//	retryops.pipeline              copied from the dead letter: the pipeline it is replayed into, when it has one
//	retryops.original.*            copied from the dead letter: the replay keeps the original Idempotency-Key
//	retryops.attempts              "0"
//	retryops.due                   the replay time
//
// The dispatcher delivers such a record as a fresh first delivery: attempt 1, no first failure, a
// deadline counted from its due time. A tier record with retryops.attempts "0" is valid only with a
// valid retryops.replay.of and retryops.replay.count; otherwise, and whenever either header is
// present but invalid, it is dead-lettered with reason malformed. A replayed record that fails
// again carries both headers, unchanged, on every retry record and on its new dead letter, which so
// names the entry it replayed.
const (
	// ReplayOf names the dead letter a replayed record replays: "<dlq topic>/<partition>/<offset>",
	// at most MaxReplayOfBytes.
	ReplayOf = "retryops.replay.of"
	// ReplayCount is how many times the record has been replayed from a dead letter queue, this
	// replay included: a base-10 integer in 1..MaxReplayCount, without sign or leading zeros.
	ReplayCount = "retryops.replay.count"
)

// HTTP headers of a delivery of a replayed record (the HTTP sink sets them only on such a delivery).
const (
	// HTTPReplayOf carries the ReplayOf header of a replayed record.
	HTTPReplayOf = "Retryops-Replay-Of"
	// HTTPReplayCount carries the ReplayCount header of a replayed record.
	HTTPReplayCount = "Retryops-Replay-Count"
)

// Bounds of the replay headers.
const (
	// MaxReplayCount bounds ReplayCount: a dead letter replayed this many times cannot be replayed
	// again.
	MaxReplayCount = 100
	// MaxReplayOfBytes bounds the ReplayOf header.
	MaxReplayOfBytes = 300
	// MaxTopicNameBytes is Kafka's limit on a topic name's length.
	MaxTopicNameBytes = 249
)

// Header is a Kafka record header. It has the fields of franz-go's kgo.RecordHeader, so that either
// converts to the other (headers.Header(h), kgo.RecordHeader(h)) without this package importing
// franz-go.
type Header struct {
	Key   string
	Value []byte
}

// ErrReplayLimit is returned by ReplayHeaders for a dead letter already replayed MaxReplayCount
// times.
var ErrReplayLimit = errors.New("the dead letter was already replayed " + strconv.Itoa(MaxReplayCount) + " times")

// ErrIncomplete is returned by ReplayHeaders for a dead letter written without its value, or
// stripped of its key, value and user headers (it carries ValueOmitted or KeyOmitted): replaying it
// would deliver something other than the original record.
var ErrIncomplete = errors.New("the dead letter was written without its value (" + ValueOmitted + " or " + KeyOmitted + "): it cannot be replayed")

// ValidTopicName reports whether name is a valid Kafka topic name: 1 to MaxTopicNameBytes of
// ASCII letters, digits, '.', '_' and '-', and neither "." nor "..".
func ValidTopicName(name string) bool {
	if name == "" || len(name) > MaxTopicNameBytes || name == "." || name == ".." {
		return false
	}
	for i := range len(name) {
		if !topicChar(name[i]) {
			return false
		}
	}
	return true
}

// topicChar reports whether c may appear in a Kafka topic name.
func topicChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return c == '.' || c == '_' || c == '-'
}

// FormatReplayOf formats the ReplayOf value of the dead letter at topic/partition/offset (the same
// form as IdempotencyKey). It does not validate; ParseReplayOf does.
func FormatReplayOf(topic string, partition int32, offset int64) string {
	return IdempotencyKey(topic, partition, offset)
}

// ParseReplayOf parses a ReplayOf value: at most MaxReplayOfBytes, a valid topic name, then a
// partition (0..2147483647) and an offset (0..9223372036854775807) in base 10 without sign or
// leading zeros, separated by '/'. It is the inverse of FormatReplayOf on every value it accepts.
func ParseReplayOf(s string) (topic string, partition int32, offset int64, err error) {
	if len(s) > MaxReplayOfBytes {
		return "", 0, 0, errors.New("longer than " + strconv.Itoa(MaxReplayOfBytes) + " bytes")
	}
	j := strings.LastIndexByte(s, '/')
	if j < 0 {
		return "", 0, 0, errors.New("not <topic>/<partition>/<offset>")
	}
	i := strings.LastIndexByte(s[:j], '/')
	if i < 0 {
		return "", 0, 0, errors.New("not <topic>/<partition>/<offset>")
	}
	topic = s[:i]
	if !ValidTopicName(topic) {
		return "", 0, 0, errors.New("not a valid topic name before the partition")
	}
	p, ok := parseCanonical(s[i+1:j], 31)
	if !ok {
		return "", 0, 0, errors.New("partition not an integer in 0..2147483647")
	}
	o, ok := parseCanonical(s[j+1:], 63)
	if !ok {
		return "", 0, 0, errors.New("offset not an integer in 0..9223372036854775807")
	}
	return topic, int32(p), o, nil
}

// ParseReplayCount parses a ReplayCount value: 1..MaxReplayCount in base 10, without sign or
// leading zeros.
func ParseReplayCount(s string) (int, error) {
	n, ok := parseCanonical(s, 31)
	if !ok || n < 1 || n > MaxReplayCount {
		return 0, errors.New("not an integer in 1.." + strconv.Itoa(MaxReplayCount))
	}
	return int(n), nil
}

// parseCanonical parses a non-negative base-10 integer of at most bits bits, written without sign,
// blanks or leading zeros (so that formatting it gives s back).
func parseCanonical(s string, bits int) (int64, bool) {
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, bits+1)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ReplayCountOf returns how many times a dead letter's record had been replayed when it was
// dead-lettered: its ReplayCount header, 0 when it has none. An invalid or repeated ReplayCount
// header is an error.
func ReplayCountOf(deadLetter []Header) (int, error) {
	n, seen := 0, false
	for _, h := range deadLetter {
		if h.Key != ReplayCount {
			continue
		}
		if seen {
			return 0, errors.New(ReplayCount + " repeated")
		}
		seen = true
		c, err := ParseReplayCount(string(h.Value))
		if err != nil {
			return 0, errors.New(ReplayCount + ": " + err.Error())
		}
		n = c
	}
	return n, nil
}

// ReplayHeaders returns the headers of the record that replays the dead letter at
// dlqTopic/partition/offset whose headers are deadLetter, at time now (see the package
// documentation): the dead letter's headers not starting with Prefix, in order, then ReplayOf,
// ReplayCount (the dead letter's own ReplayCount plus one, 1 when it has none), its Pipeline (the
// last, when it has one: the dispatcher reading the tier delivers the replay only when it names that
// dispatcher's pipeline, so a caller replaying into another pipeline sets it to that one first), the
// four retryops.original.* headers copied from the dead letter, Attempts "0" and Due now. Values of
// the copied headers share their bytes with deadLetter.
//
// It fails, returning no headers, when the coordinates do not form a valid ReplayOf, when the dead
// letter lacks a valid retryops.original.* header (every dead letter the dispatcher writes has
// them), when its ReplayCount is invalid, with ErrIncomplete when it was written without its value,
// and with ErrReplayLimit when it was already replayed MaxReplayCount times.
func ReplayHeaders(deadLetter []Header, dlqTopic string, partition int32, offset int64, now time.Time) ([]Header, error) {
	of := FormatReplayOf(dlqTopic, partition, offset)
	if _, _, _, err := ParseReplayOf(of); err != nil {
		return nil, errors.New("dead letter " + strconv.QuoteToASCII(cut(of)) + ": " + err.Error())
	}
	count, err := ReplayCountOf(deadLetter)
	if err != nil {
		return nil, err
	}
	if count >= MaxReplayCount {
		return nil, ErrReplayLimit
	}
	var orig [4][]byte // topic, partition, offset, timestamp: the last of each, as the dispatcher reads them
	var pipeline []byte
	user := 0
	for _, h := range deadLetter {
		switch h.Key {
		case Pipeline:
			pipeline = h.Value
		case OriginalTopic:
			orig[0] = h.Value
		case OriginalPartition:
			orig[1] = h.Value
		case OriginalOffset:
			orig[2] = h.Value
		case OriginalTimestamp:
			orig[3] = h.Value
		case ValueOmitted, KeyOmitted:
			return nil, ErrIncomplete
		}
		if !IsOwned(h.Key) {
			user++
		}
	}
	if err := validOriginal(orig); err != nil {
		return nil, err
	}
	out := make([]Header, 0, user+9)
	for _, h := range deadLetter {
		if !IsOwned(h.Key) {
			out = append(out, h)
		}
	}
	out = append(out,
		Header{Key: ReplayOf, Value: []byte(of)},
		Header{Key: ReplayCount, Value: []byte(strconv.Itoa(count + 1))})
	if pipeline != nil {
		out = append(out, Header{Key: Pipeline, Value: pipeline})
	}
	return append(out,
		Header{Key: OriginalTopic, Value: orig[0]},
		Header{Key: OriginalPartition, Value: orig[1]},
		Header{Key: OriginalOffset, Value: orig[2]},
		Header{Key: OriginalTimestamp, Value: orig[3]},
		Header{Key: Attempts, Value: []byte("0")},
		Header{Key: Due, Value: []byte(FormatTime(now))},
	), nil
}

// validOriginal checks the retryops.original.* values of a dead letter as the dispatcher reads
// them.
func validOriginal(orig [4][]byte) error {
	names := [4]string{OriginalTopic, OriginalPartition, OriginalOffset, OriginalTimestamp}
	for i, v := range orig {
		if v == nil {
			return errors.New("the dead letter has no " + names[i] + " header")
		}
	}
	bad := func(i int) error {
		return errors.New("the dead letter's " + names[i] + " " + strconv.QuoteToASCII(cut(string(orig[i]))) + " is invalid")
	}
	if !ValidTopicName(string(orig[0])) {
		return bad(0)
	}
	if p, err := strconv.ParseInt(string(orig[1]), 10, 32); err != nil || p < 0 {
		return bad(1)
	}
	if o, err := strconv.ParseInt(string(orig[2]), 10, 64); err != nil || o < 0 {
		return bad(2)
	}
	if _, err := ParseTime(string(orig[3])); err != nil {
		return bad(3)
	}
	return nil
}

// cut bounds an untrusted value quoted in an error message.
func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
