package kafkastats

import (
	"testing"

	"github.com/retryops/retry-operator/internal/kafka"
)

// One topic alone may hold more ranges than the bound in all: a Replay into a topic of many
// partitions (a tier or a source may have 10,000), whose records land between others' so that no
// two of a partition touch. The bound holds for it too; its partitions keep fewer ranges each, and
// the records merged in count as due (never fewer than were written).
func TestReplayedBoundHoldsForOneTopicAlone(t *testing.T) {
	var r Replayed
	const partitions = 1000
	for round := range int64(maxReplayedRanges) {
		res := make([]kafka.ProduceResult, partitions)
		for p := range partitions {
			res[p] = kafka.ProduceResult{Partition: int32(p), Offset: round * 10}
		}
		r.Note("c", "wide", res)
	}
	if r.ranges > maxReplayedRangesTotal {
		t.Fatalf("%d ranges kept for one topic, more than the %d in all", r.ranges, maxReplayedRangesTotal)
	}
	n := 0
	for _, rs := range r.topics[replayedKey{"c", "wide"}].parts {
		n += len(rs)
	}
	if n != r.ranges {
		t.Fatalf("%d ranges counted, %d kept", r.ranges, n)
	}
	offsets := make([]kafka.PartitionOffsets, partitions)
	for p := range offsets {
		offsets[p] = kafka.PartitionOffsets{Partition: int32(p), End: 1 << 20}
	}
	if got := r.ReplayedDue("c", "wide", offsets, nil, nil); got < partitions*maxReplayedRanges {
		t.Fatalf("%d replayed records counted, fewer than the %d written", got, partitions*maxReplayedRanges)
	}
}
