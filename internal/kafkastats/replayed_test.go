package kafkastats

import (
	"errors"
	"strconv"
	"testing"

	"github.com/retryops/retry-operator/internal/kafka"
)

func written(p int32, offs ...int64) []kafka.ProduceResult {
	rs := make([]kafka.ProduceResult, len(offs))
	for i, o := range offs {
		rs[i] = kafka.ProduceResult{Partition: p, Offset: o}
	}
	return rs
}

// The replayed records counted are those beyond the due records and the group's commit, within
// the partition's end; the acknowledged ones only; ranges read are dropped.
func TestReplayedDueCountsWhatTheDueOffsetsMissed(t *testing.T) {
	var r Replayed
	r.Note("c", "t", written(0, 3, 4, 5, 9))
	r.Note("c", "t", []kafka.ProduceResult{{Partition: 0, Offset: 6}, {Partition: 0, Offset: 7, Err: errors.New("refused")}})
	r.Note("c", "t", written(1, 0, 1))
	offsets := []kafka.PartitionOffsets{{Partition: 0, End: 10}, {Partition: 1, End: 2}}
	// Partition 0: due up to 4 (the record at 3 counted by DueLag); partition 1: dueEnd unknown.
	ends := map[int32]kafka.TimedOffset{0: {Offset: 4, Timestamp: 1}}
	if got := r.ReplayedDue("c", "t", offsets, map[int32]int64{0: 2}, ends); got != 4+2 {
		t.Fatalf("replayed due: %d, want 6 (4, 5, 6, 9 of partition 0; 0, 1 of partition 1)", got)
	}
	if got := r.ReplayedDue("other", "t", offsets, nil, ends); got != 0 {
		t.Fatalf("another connection's tier: %d", got)
	}
	// The group read partition 1 and up to 6 of partition 0; everything due (-1).
	ends = map[int32]kafka.TimedOffset{0: {Offset: -1, Timestamp: -1}, 1: {Offset: -1, Timestamp: -1}}
	if got := r.ReplayedDue("c", "t", offsets, map[int32]int64{0: 6, 1: 2}, ends); got != 0 {
		t.Fatalf("all due by their timestamps: %d counted again", got)
	}
	ends = map[int32]kafka.TimedOffset{0: {Offset: 6, Timestamp: 1}}
	if got := r.ReplayedDue("c", "t", offsets, map[int32]int64{0: 6, 1: 2}, ends); got != 1+1 {
		t.Fatalf("replayed due: %d, want 2 (6 and 9)", got)
	}
	if got := len(r.topics[replayedKey{"c", "t"}].parts[1]); got != 0 {
		t.Fatalf("partition 1's ranges, read, kept: %d", got)
	}
	r.ReplayedDue("c", "t", offsets, map[int32]int64{0: 10}, nil)
	if len(r.topics) != 0 {
		t.Fatal("a tier read to its end is forgotten")
	}
}

// Past the bound on ranges the closest merge (counting more, never less); past the bound on tiers
// the one written longest ago goes.
func TestReplayedStaysBounded(t *testing.T) {
	var r Replayed
	for i := range int64(maxReplayedRanges + 10) {
		r.Note("c", "t", written(0, i*10))
	}
	rs := r.topics[replayedKey{"c", "t"}].parts[0]
	if len(rs) != maxReplayedRanges {
		t.Fatalf("%d ranges kept, want %d", len(rs), maxReplayedRanges)
	}
	offsets := []kafka.PartitionOffsets{{Partition: 0, End: 1 << 20}}
	if got := r.ReplayedDue("c", "t", offsets, nil, nil); got < maxReplayedRanges+10 {
		t.Fatalf("merged ranges count %d, fewer than the records written", got)
	}
	for i := range maxReplayedTopics {
		r.Note("c", "tier-"+strconv.Itoa(i), written(0, 1))
	}
	if len(r.topics) != maxReplayedTopics {
		t.Fatalf("%d tiers kept", len(r.topics))
	}
	if _, ok := r.topics[replayedKey{"c", "t"}]; ok {
		t.Fatal("the tier written longest ago is kept")
	}

	// Ranges in all: many partitions of many tiers.
	var many Replayed
	for i := range maxReplayedRangesTotal/maxReplayedRanges + 3 {
		var res []kafka.ProduceResult
		for j := range int64(maxReplayedRanges) {
			res = append(res, kafka.ProduceResult{Partition: int32(j % 4), Offset: j * 10})
		}
		many.Note("c", "tier-"+strconv.Itoa(i), res)
		if many.ranges > maxReplayedRangesTotal {
			t.Fatalf("%d ranges kept after tier %d", many.ranges, i)
		}
	}
	n := 0
	for _, tp := range many.topics {
		for _, rs := range tp.parts {
			n += len(rs)
		}
	}
	if n != many.ranges {
		t.Fatalf("%d ranges counted, %d kept", many.ranges, n)
	}
}

func TestAddRangeMerges(t *testing.T) {
	rs := addRange(nil, offsetRange{5, 7})
	rs = addRange(rs, offsetRange{1, 2})
	rs = addRange(rs, offsetRange{9, 10})
	rs = addRange(rs, offsetRange{2, 5}) // touches both neighbours
	want := []offsetRange{{1, 7}, {9, 10}}
	if len(rs) != len(want) || rs[0] != want[0] || rs[1] != want[1] {
		t.Fatalf("ranges %v, want %v", rs, want)
	}
	rs = addRange(rs, offsetRange{0, 20})
	if len(rs) != 1 || rs[0] != (offsetRange{0, 20}) {
		t.Fatalf("ranges %v", rs)
	}
}
