package kafkastats

import (
	"fmt"
	"testing"
	"time"

	"github.com/retryops/retry-operator/internal/kafka"
)

func deadLetterAt(partition int32, offset int64, at time.Time, reason, errType string) kafka.Record {
	return kafka.Record{Partition: partition, Offset: offset, Timestamp: at, Headers: []kafka.Header{
		{Key: "other", Value: []byte("x")},
		{Key: HeaderReason, Value: []byte(reason)},
		{Key: HeaderErrorType, Value: []byte(errType)},
		{Key: HeaderPipeline, Value: []byte("ns/p")},
	}}
}

// The chunks are invisible: trimming inside a chunk, at its edge and past several of them, gaps in
// the offsets and timestamps too far apart for one chunk all count as one list of records would.
func TestTallyChunksCountLikeAList(t *testing.T) {
	base := time.UnixMilli(1_700_000_000_000).UTC()
	tally := NewTally()
	type rec struct {
		offset int64
		milli  int64
		reason string
	}
	var all []rec
	offset := int64(0)
	for i := range 3*chunkLen + 100 {
		milli := base.UnixMilli() + int64(i)
		if i == chunkLen+10 {
			milli += 40 * 24 * 3600 * 1000 // 40 days later: past an int32 of milliseconds
		}
		if i == 2*chunkLen {
			milli -= 40 * 24 * 3600 * 1000 // and back
		}
		if i%1000 == 999 {
			offset += 7 // a gap (compaction, transaction markers)
		}
		r := rec{offset: offset, milli: milli, reason: fmt.Sprintf("r%d", i%3)}
		all = append(all, r)
		tally.Add(deadLetterAt(0, r.offset, time.UnixMilli(r.milli), r.reason, "E"))
		offset++
	}
	end := offset
	want := func(start int64) string {
		counts := map[string]int64{}
		var n, oldest, newest int64
		for _, r := range all {
			if r.offset < start {
				continue
			}
			n++
			counts[r.reason]++
			if oldest == 0 || r.milli < oldest {
				oldest = r.milli
			}
			newest = max(newest, r.milli)
		}
		return fmt.Sprintf("%d %v %d %d", n, counts, oldest, newest)
	}
	got := func() string {
		b := tally.Breakdown(0)
		counts := map[string]int64{}
		for _, c := range b.Reasons {
			counts[c.Name] = c.Count
		}
		var oldest, newest int64
		if b.Messages > 0 {
			oldest, newest = b.Oldest.UnixMilli(), b.Newest.UnixMilli()
		}
		return fmt.Sprintf("%d %v %d %d", b.Messages, counts, oldest, newest)
	}
	if g, w := got(), want(0); g != w {
		t.Fatalf("all: got %s, want %s", g, w)
	}
	for _, start := range []int64{5, int64(chunkLen) - 1, int64(chunkLen), int64(chunkLen) + 11, 3*int64(chunkLen) + 3, end - 1, end} {
		if ranges := tally.Plan([]kafka.PartitionOffsets{{Partition: 0, Start: start, End: end}}); len(ranges) != 0 {
			t.Fatalf("start %d: ranges %v, want none", start, ranges)
		}
		if g, w := got(), want(start); g != w {
			t.Fatalf("from %d: got %s, want %s", start, g, w)
		}
	}
	// Records added after everything was trimmed start afresh.
	tally.Add(deadLetterAt(0, end, base, "late", "E"))
	if b := tally.Breakdown(0); b.Messages != 1 || b.Reasons[0].Name != "late" {
		t.Fatalf("after adding to an emptied partition: %+v", b)
	}
}

// Tallying a record whose names were seen before allocates nothing, but for a chunk every chunkLen
// records: a scan of a million records leaves no garbage in the tally.
func TestTallyAddAllocatesPerChunkNotPerRecord(t *testing.T) {
	tally := NewTally()
	at := time.UnixMilli(1_700_000_000_000)
	recs := make([]kafka.Record, 64)
	for i := range recs {
		recs[i] = deadLetterAt(0, 0, at, fmt.Sprintf("r%d", i%4), fmt.Sprintf("E%d", i%3))
	}
	offset := int64(0)
	add := func() {
		for _, r := range recs {
			r.Offset = offset
			offset++
			tally.Add(r)
		}
	}
	add()
	const runs = 1000
	allocs := testing.AllocsPerRun(runs, add)
	// 64 records a run: a chunk (and its growth, about a dozen appends) every chunkLen/64 runs.
	if perRecord := allocs / float64(len(recs)); perRecord > 0.01 {
		t.Fatalf("%.3f allocations per record tallied", perRecord)
	}
	if b := tally.Breakdown(0); b.Messages != int64(len(recs))*(runs+2) {
		t.Fatalf("tallied %d", b.Messages)
	}
}

// A header that is missing counts as "unknown"; one that is present and empty counts as its value.
func TestTallyMissingHeaderIsUnknown(t *testing.T) {
	tally := NewTally()
	tally.Add(kafka.Record{Offset: 0, Headers: []kafka.Header{{Key: HeaderReason, Value: []byte{}}}})
	b := tally.Breakdown(0)
	if fmt.Sprint(b.Reasons, b.ErrorTypes, b.Pipelines) != "[{ 1}] [{unknown 1}] [{unknown 1}]" {
		t.Fatalf("%v %v %v", b.Reasons, b.ErrorTypes, b.Pipelines)
	}
}
