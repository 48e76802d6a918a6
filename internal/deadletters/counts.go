package deadletters

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Counts returns how many of the dead letters held (offsets: the topic's partitions, from
// Admin.ListOffsets) are in each state: the decisions recorded on offsets in [start, end) count under
// their state, every other dead letter held is Pending. Offsets a compaction or a delete left empty
// count as Pending too (a dead letter topic is not compacted).
func (s *States) Counts(offsets []kafka.PartitionOffsets) map[retryv1alpha1.DeadLetterState]int64 {
	out := map[retryv1alpha1.DeadLetterState]int64{retryv1alpha1.DeadLetterPending: 0, retryv1alpha1.DeadLetterReplayed: 0, retryv1alpha1.DeadLetterResolved: 0, retryv1alpha1.DeadLetterIgnored: 0}
	held := map[int32]kafka.PartitionOffsets{}
	var total int64
	for _, p := range offsets {
		held[p.Partition] = p
		total += max(p.End-p.Start, 0)
	}
	var decided int64
	for id, st := range s.ByID {
		p, ok := held[id.Partition]
		if !ok || id.Offset < p.Start || id.Offset >= p.End || st.Pending() {
			continue
		}
		out[st.State]++
		decided++
	}
	out[retryv1alpha1.DeadLetterPending] = max(total-decided, 0)
	return out
}

// OldestPending returns the dead-lettering time of the oldest Pending dead letter of dlqTopic (zero
// when none): per partition, it reads from the start to the first dead letter without a decision,
// so it reads only the decided dead letters at the head of each partition, plus one.
func OldestPending(ctx context.Context, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string, offsets []kafka.PartitionOffsets, states *States) (time.Time, error) {
	var oldest time.Time
	byPart := map[int32]kafka.PartitionOffsets{}
	for _, p := range offsets {
		byPart[p.Partition] = p
	}
	for _, part := range slices.Sorted(maps.Keys(byPart)) {
		p := byPart[part]
		if p.End <= p.Start {
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		found := false
		err := scanner.Scan(sctx, conn, map[string]map[int32]kafka.OffsetRange{dlqTopic: {part: {From: p.Start, To: p.End}}}, func(r kafka.Record) {
			if found || !states.Get(ID{Partition: r.Partition, Offset: r.Offset}).Pending() {
				return
			}
			found = true
			if oldest.IsZero() || r.Timestamp.Before(oldest) {
				oldest = r.Timestamp
			}
			cancel()
		})
		cancel()
		if ourStop := found && errors.Is(err, context.Canceled) && ctx.Err() == nil; err != nil && !ourStop {
			return time.Time{}, err
		}
	}
	return oldest, nil
}
