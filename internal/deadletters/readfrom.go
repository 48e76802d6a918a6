package deadletters

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/retryops/retry-operator/internal/kafka"
)

// ReadFromKey is the key of a read-from record in a record of decisions: not an ID, so a reader
// that does not know it passes it over as an invalid record.
const ReadFromKey = "retryops.dev/read-from"

// ReadFrom is the value of a read-from record, which the reconciler writes after a survey (Survey):
// a reader of the record of decisions (of one partition, as the reconciler makes it) that reads
// the records at Also, then from Offset, gets the same decisions on the dead letters held as one
// that reads it all, because every other record below Offset is superseded by a later one of its
// key, a tombstone, or a decision on no dead letter held (gone below the start, beyond the end, of
// another incarnation of the topic), and such a record stays so. The deadletters API starts a
// replica's first read there, so that decisions on dead letters long gone are not read again.
type ReadFrom struct {
	// Offset is where a reader may start, after reading Also.
	Offset int64 `json:"offset"`
	// Also are the offsets below Offset of the decisions still in force there (the oldest ones on
	// dead letters held, at most maxReadFromAlso), ascending.
	Also []int64 `json:"also,omitempty"`
	// TopicID is the ID of the dead letter topic the survey judged by: a reader of another
	// incarnation of the topic starts at the beginning.
	TopicID string `json:"topicID,omitempty"`
}

// maxReadFromAlso bounds ReadFrom.Also: the decisions in force below the offset a reader starts at
// (a record of at most about 2 KiB).
const maxReadFromAlso = 128

// readFromStep is how far the offset a survey finds must be beyond the last read-from record's for
// a new one: a read-from record is a record of decisions too, so one per survey would never stop.
const readFromStep = 1000

// maxReadFromSearch bounds the records FindReadFrom reads back from the end of the record of
// decisions: a survey writes a read-from record again when the last one is half as far back.
const maxReadFromSearch = 4096

func (rf ReadFrom) validate() error {
	if rf.Offset < 0 || len(rf.TopicID) > MaxTopicIDBytes || len(rf.Also) > maxReadFromAlso {
		return fmt.Errorf("read-from offset %d, topic ID or %d offsets before it out of bounds", rf.Offset, len(rf.Also))
	}
	for i, a := range rf.Also {
		if a < 0 || a >= rf.Offset || (i > 0 && a <= rf.Also[i-1]) {
			return errors.New("read-from offsets before its offset not ascending below it")
		}
	}
	return nil
}

func encodeReadFrom(rf ReadFrom) ([]byte, error) {
	if err := rf.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(rf)
}

func decodeReadFrom(value []byte) (ReadFrom, error) {
	var rf ReadFrom
	if len(value) > MaxStateBytes {
		return rf, errors.New("read-from record too long")
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rf); err != nil {
		return rf, fmt.Errorf("read-from record: %w", err)
	}
	if dec.More() {
		return rf, errors.New("read-from record: trailing data")
	}
	return rf, rf.validate()
}

// readFromSearchFloor is the size of a record of decisions below which FindReadFrom does not look:
// reading it all costs about as much as looking.
const readFromSearchFloor = 1024

// FindReadFrom returns where a reader of the record of decisions of dlqTopic (span: its offsets as
// the caller listed them) may start to get the decisions that belong to the topic whose ID is now
// topicID: the latest read-from record, looked for among the last records (at most
// maxReadFromSearch of them), or nil (from the start) when there is none there, it was written for
// another topic ID, or the record of decisions has more than one partition or few records.
func FindReadFrom(ctx context.Context, scanner kafka.Scanner, conn kafka.Connection, dlqTopic, topicID string, span []kafka.PartitionOffsets) (*ReadFrom, error) {
	topic, ok := StateTopic(dlqTopic)
	if !ok || len(span) != 1 || span[0].Partition != 0 || span[0].End-span[0].Start <= readFromSearchFloor {
		return nil, nil
	}
	p := span[0]
	hi, n := p.End, int64(256)
	for hi > p.Start && p.End-hi < maxReadFromSearch {
		lo := max(p.Start, hi-n, p.End-maxReadFromSearch)
		var found *ReadFrom
		var at int64
		err := scanner.Scan(ctx, conn, map[string]map[int32]kafka.OffsetRange{topic: {0: {From: lo, To: hi}}}, func(r kafka.Record) {
			if string(r.Key) != ReadFromKey {
				return
			}
			if rf, err := decodeReadFrom(r.Value); err == nil {
				found, at = &rf, r.Offset
			}
		})
		if err != nil {
			return nil, err
		}
		if found != nil {
			if found.TopicID != topicID || found.Offset > at {
				return nil, nil
			}
			return found, nil
		}
		hi, n = lo, 2*n
	}
	return nil, nil
}

// ScanStatesFrom is ScanStatesAt for a reader that starts as rf says (nil: at the start): the
// records at rf.Also, then from rf.Offset.
func ScanStatesFrom(ctx context.Context, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string, span []kafka.PartitionOffsets, rf *ReadFrom, fn func(id ID, st State, err error)) error {
	if rf == nil {
		return ScanStatesAt(ctx, scanner, conn, dlqTopic, span, nil, fn)
	}
	topic, ok := StateTopic(dlqTopic)
	if !ok || len(span) != 1 || span[0].Partition != 0 {
		return ScanStatesAt(ctx, scanner, conn, dlqTopic, span, nil, fn)
	}
	p := span[0]
	decision := func(r stateRecord) {
		if r.readFrom == nil {
			fn(r.id, r.st, r.err)
		}
	}
	for i := 0; i < len(rf.Also); {
		j := i + 1
		for j < len(rf.Also) && rf.Also[j] == rf.Also[j-1]+1 {
			j++
		}
		run := kafka.PartitionOffsets{Partition: 0, Start: max(p.Start, rf.Also[i]), End: min(p.End, rf.Also[j-1]+1)}
		if err := scanStateRange(ctx, scanner, conn, topic, []kafka.PartitionOffsets{run}, nil, decision); err != nil {
			return err
		}
		i = j
	}
	return scanStateRange(ctx, scanner, conn, topic, span, map[int32]int64{0: rf.Offset}, decision)
}
