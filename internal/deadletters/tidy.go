package deadletters

import (
	"context"

	"github.com/retryops/retry-operator/internal/kafka"
)

// MaxTidyUpdates bounds the updates one Survey returns, so the reconciler writes at most this many
// state records per reconcile of a queue: a history of decisions on records long gone is
// tombstoned over several reconciles.
const MaxTidyUpdates = 2000

// Survey reads the whole record of decisions of dlqTopic, whose ID is now topicID and whose
// partitions hold offsets (Admin.ListOffsets), as the reconciler does to count the dead letters by
// state. It returns the states of the dead letters held (as LoadStates keeping the offsets held),
// and at most maxUpdates updates that keep the record of decisions to what the topic holds:
//
//   - a tombstone for every decision on a record that is gone: below its partition's start offset
//     (trimmed by retention, retention.maxMessages or a purge whose tombstones were not written), or
//     made on another incarnation of the topic (another topic ID; only when topicID is known);
//   - when topicID is known, every legacy decision (no topic ID) on a record held, recorded again
//     with topicID: from then on it belongs to this topic only.
//
// Decisions beyond a partition's end offset, or on a partition the offsets do not list, are left
// alone (offsets may be older than the record of decisions). Invalid records are left alone too (a
// tombstone would drop the valid decision an invalid record leaves in force).
func Survey(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic, topicID string, offsets []kafka.PartitionOffsets, maxUpdates int) (*States, []StateUpdate, error) {
	held := map[int32]kafka.PartitionOffsets{}
	for _, p := range offsets {
		held[p.Partition] = p
	}
	out := &States{ByID: map[ID]State{}}
	stale := map[ID]bool{}
	legacy := map[ID]bool{}
	_, err := ScanStates(ctx, admin, scanner, conn, dlqTopic, nil, func(id ID, st State, err error) {
		if err != nil {
			out.Invalid++
			return
		}
		delete(stale, id)
		delete(legacy, id)
		p, listed := held[id.Partition]
		switch {
		case st.Pending():
			out.Set(id, st)
		case !st.BelongsTo(topicID):
			out.Foreign++
			out.Set(id, State{})
			stale[id] = topicID != ""
		case listed && id.Offset < p.Start:
			out.Set(id, State{})
			stale[id] = true
		case listed && id.Offset < p.End:
			out.Set(id, st)
			legacy[id] = st.TopicID == "" && topicID != ""
		}
	})
	if err != nil {
		return nil, nil, err
	}
	var updates []StateUpdate
	for id, drop := range stale {
		if len(updates) >= maxUpdates {
			break
		}
		if drop {
			updates = append(updates, StateUpdate{ID: id})
		}
	}
	for id, bind := range legacy {
		if len(updates) >= maxUpdates {
			break
		}
		if bind {
			st := out.Get(id)
			st.TopicID = topicID
			updates = append(updates, StateUpdate{ID: id, State: st})
		}
	}
	return out, updates, nil
}

// Legacy returns a tombstone for every legacy decision (no topic ID) in the record of decisions of
// dlqTopic: the reconciler writes them before it creates the queue's deleted topic again, so that
// none of them applies to the new topic's records at the same offsets.
func Legacy(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string) ([]StateUpdate, error) {
	legacy := map[ID]bool{}
	_, err := ScanStates(ctx, admin, scanner, conn, dlqTopic, nil, func(id ID, st State, err error) {
		if err == nil {
			legacy[id] = !st.Pending() && st.TopicID == ""
		}
	})
	if err != nil {
		return nil, err
	}
	var out []StateUpdate
	for id, drop := range legacy {
		if drop {
			out = append(out, StateUpdate{ID: id})
		}
	}
	return out, nil
}
