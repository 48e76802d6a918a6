package deadletters

import (
	"context"
	"slices"

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
//   - a tombstone for every decision on a record the topic never held: at or beyond its partition's
//     end offset, or on a partition it does not have, as the dead letter topic's offsets are listed
//     after the record of decisions is read (every decision read was recorded before, on a record
//     below those ends; offsets may be older than the record of decisions);
//   - when topicID is known, every unbound decision (no topic ID: recorded where the brokers gave
//     none) on a record held, recorded again with topicID: from then on it belongs to this topic
//     only;
//   - last, a read-from record (ReadFrom), when the offset below which every record but a few is
//     superseded or on no dead letter held has moved on far enough since the last one, or the last
//     one is too far back for a reader to find.
//
// Invalid records are left alone (a tombstone would drop the valid decision an invalid record
// leaves in force).
func Survey(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic, topicID string, offsets []kafka.PartitionOffsets, maxUpdates int) (*States, []StateUpdate, error) {
	held := map[int32]kafka.PartitionOffsets{}
	for _, p := range offsets {
		held[p.Partition] = p
	}
	out := &States{ByID: map[ID]State{}}
	// The latest valid decision on each dead letter, and its offset in the record of decisions.
	type latest struct {
		st State
		at int64
	}
	last := map[ID]latest{}
	var prev *ReadFrom
	var prevAt int64
	span, err := scanStates(ctx, admin, scanner, conn, dlqTopic, nil, func(r stateRecord) {
		switch {
		case r.readFrom != nil:
			prev, prevAt = r.readFrom, r.at
		case r.err != nil:
			out.Invalid++
		case r.st.Pending():
			delete(last, r.id)
		default:
			last[r.id] = latest{st: r.st, at: r.at}
		}
	})
	if err != nil {
		return nil, nil, err
	}
	now, err := admin.ListOffsets(ctx, dlqTopic)
	if err != nil {
		return nil, nil, err
	}
	nowParts, nowKnown := now[dlqTopic]
	ends := map[int32]kafka.PartitionOffsets{}
	for _, p := range nowParts {
		ends[p.Partition] = p
	}
	readFrom := int64(-1) // where a reader may start, -1 when unknown
	if len(span) == 1 && span[0].Partition == 0 && nowKnown {
		readFrom = span[0].End
	}
	stale := map[ID]bool{}
	unbound := map[ID]bool{}
	var inForce []int64 // the offsets in the record of decisions of the decisions on dead letters held
	for id, l := range last {
		p, listed := held[id.Partition]
		e, exists := ends[id.Partition]
		live := false
		switch {
		case !l.st.BelongsTo(topicID):
			out.Foreign++
			stale[id] = topicID != ""
		case listed && id.Offset < p.Start:
			stale[id] = true
		case nowKnown && (!exists || id.Offset >= e.End):
			stale[id] = true
		case listed && id.Offset < p.End:
			out.Set(id, l.st)
			unbound[id] = l.st.TopicID == "" && topicID != ""
			live = true
		default:
			live = true // held, after the offsets given
		}
		if live && (!exists || id.Offset >= e.Start) {
			inForce = append(inForce, l.at)
		}
	}
	if readFrom >= 0 {
		slices.Sort(inForce)
		if len(inForce) > maxReadFromAlso {
			readFrom = min(readFrom, inForce[maxReadFromAlso])
			inForce = inForce[:maxReadFromAlso]
		}
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
	for id, bind := range unbound {
		if len(updates) >= maxUpdates {
			break
		}
		if bind {
			st := out.Get(id)
			st.TopicID = topicID
			updates = append(updates, StateUpdate{ID: id, State: st})
		}
	}
	base := int64(0)
	if prev != nil && prev.TopicID == topicID {
		base = prev.Offset
	}
	// Again when the last one moves out of FindReadFrom's reach, though the offset stays.
	far := prev != nil && readFrom >= 0 && span[0].End-prevAt >= maxReadFromSearch/2
	if readFrom >= base+readFromStep || (far && readFrom >= readFromStep) {
		updates = append(updates, StateUpdate{ReadFrom: &ReadFrom{Offset: readFrom, Also: inForce, TopicID: topicID}})
	}
	return out, updates, nil
}

// Unbound returns a tombstone for every unbound decision (no topic ID) in the record of decisions
// of dlqTopic: the reconciler writes them before it creates the queue's deleted topic again, so
// that none of them applies to the new topic's records at the same offsets. On brokers that give
// no topic IDs every decision is unbound, and this is what keeps a recreated topic's dead letters
// Pending.
func Unbound(ctx context.Context, admin kafka.Admin, scanner kafka.Scanner, conn kafka.Connection, dlqTopic string) ([]StateUpdate, error) {
	unbound := map[ID]bool{}
	_, err := ScanStates(ctx, admin, scanner, conn, dlqTopic, nil, func(id ID, st State, err error) {
		if err == nil {
			unbound[id] = !st.Pending() && st.TopicID == ""
		}
	})
	if err != nil {
		return nil, err
	}
	var out []StateUpdate
	for id, drop := range unbound {
		if drop {
			out = append(out, StateUpdate{ID: id})
		}
	}
	return out, nil
}
