package deadletters

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Reasons a matched dead letter is skipped (Progress.SkippedBy, status.skippedReasons).
const (
	// SkipAlreadyReplayed, SkipAlreadyResolved, SkipAlreadyIgnored and SkipPending: the dead letter is
	// in a state the selector does not select ("Already" + its state, or Pending).
	SkipAlreadyReplayed = "AlreadyReplayed"
	SkipAlreadyResolved = "AlreadyResolved"
	SkipAlreadyIgnored  = "AlreadyIgnored"
	SkipPending         = "Pending"
	// SkipReplayLimit: Replay of a dead letter replayed maxReplays times already.
	SkipReplayLimit = "ReplayLimit"
	// SkipNoTarget: Replay found nowhere to produce the dead letter (no or an unknown pipeline).
	SkipNoTarget = "NoTarget"
	// SkipOtherPipeline: Replay without spec.target of a dead letter the dispatcher wrote for a
	// record of another pipeline's retry tier (reason malformed, error type OtherPipelineRecord):
	// its retryops.pipeline is the pipeline that refused it, so replaying by it would deliver the
	// record to the sink it was kept from. Only a target the action names replays it.
	SkipOtherPipeline = "OtherPipelineRecord"
	// SkipMalformed: Replay of a dead letter whose context headers cannot make a replay (no valid
	// retryops.original.* headers, an invalid replay count).
	SkipMalformed = "MalformedDeadLetter"
	// SkipIncomplete: Replay of a dead letter written without its value, or stripped of its key,
	// value and headers (retryops.value.omitted, retryops.key.omitted): it cannot be replayed.
	SkipIncomplete = "IncompleteDeadLetter"
	// SkipBlocksPrefix: for Purge, the first dead letter of a partition that does not match, which
	// ends the prefix deleted.
	SkipBlocksPrefix = "BlocksPrefix"
)

// Progress is how far an action got: what the caller copies into the action's status (ApplyTo) and
// hands back to Run to resume (FromStatus).
type Progress struct {
	// Matched, Done, Skipped, Failed and Duplicates are the status counts of the same names.
	Matched, Done, Skipped, Failed, Duplicates int64
	// SkippedBy counts the skipped dead letters by reason (the Skip constants).
	SkippedBy map[string]int64
	// Checkpoint is, per partition, the offset of the first dead letter not yet considered: every
	// decision on the dead letters below it is durable.
	Checkpoint map[int32]int64
	// MatchedRecords lists, in DryRun, the first matched dead letters (at most retryv1alpha1.MaxListedRecords).
	MatchedRecords []ID
	// Blocking lists, for Purge, the dead letter that ended each partition's prefix.
	Blocking []ID
	// Complete is true on the last report of an action that considered its whole snapshot (or
	// reached maxRecords).
	Complete bool
}

func (p *Progress) skip(reason string) {
	p.Skipped++
	if p.SkippedBy == nil {
		p.SkippedBy = map[string]int64{}
	}
	p.SkippedBy[reason]++
}

func (p *Progress) clone() Progress {
	out := *p
	out.SkippedBy = maps.Clone(p.SkippedBy)
	out.Checkpoint = maps.Clone(p.Checkpoint)
	out.MatchedRecords = slices.Clone(p.MatchedRecords)
	out.Blocking = slices.Clone(p.Blocking)
	return out
}

// ApplyTo copies p into an action's status: the counts, progress ("<done>/<matched>"), the skipped
// reasons (largest first, at most 16), the checkpoint and the listed records. It leaves the phase,
// times, snapshot and conditions to the caller.
func (p Progress) ApplyTo(st *retryv1alpha1.DeadLetterActionStatus) {
	st.Matched, st.Done, st.Skipped, st.Failed, st.Duplicates = p.Matched, p.Done, p.Skipped, p.Failed, p.Duplicates
	st.Progress = strconv.FormatInt(p.Done, 10) + "/" + strconv.FormatInt(p.Matched, 10)
	st.SkippedReasons = nil
	for r, n := range p.SkippedBy {
		st.SkippedReasons = append(st.SkippedReasons, retryv1alpha1.NamedCount{Name: r, Count: n})
	}
	slices.SortFunc(st.SkippedReasons, func(a, b retryv1alpha1.NamedCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Name, b.Name))
	})
	if len(st.SkippedReasons) > 16 {
		st.SkippedReasons = st.SkippedReasons[:16]
	}
	st.Checkpoint = OffsetsToStatus(p.Checkpoint)
	st.MatchedRecords = refs(p.MatchedRecords)
	st.BlockingRecords = refs(p.Blocking)
}

// FromStatus is the Progress an action's status records, to resume it.
func FromStatus(st *retryv1alpha1.DeadLetterActionStatus) *Progress {
	p := &Progress{
		Matched: st.Matched, Done: st.Done, Skipped: st.Skipped, Failed: st.Failed, Duplicates: st.Duplicates,
		Checkpoint: OffsetsFromStatus(st.Checkpoint),
	}
	for _, c := range st.SkippedReasons {
		if p.SkippedBy == nil {
			p.SkippedBy = map[string]int64{}
		}
		p.SkippedBy[c.Name] = c.Count
	}
	for _, lists := range []struct {
		from []retryv1alpha1.RecordRef
		to   *[]ID
	}{{st.MatchedRecords, &p.MatchedRecords}, {st.BlockingRecords, &p.Blocking}} {
		for _, r := range lists.from {
			if id, ok := ParseID(string(r)); ok {
				*lists.to = append(*lists.to, id)
			}
		}
	}
	return p
}

// OffsetsToStatus converts offsets per partition to the status form, sorted by partition.
func OffsetsToStatus(m map[int32]int64) []retryv1alpha1.PartitionOffset {
	if len(m) == 0 {
		return nil
	}
	out := make([]retryv1alpha1.PartitionOffset, 0, len(m))
	for _, p := range slices.Sorted(maps.Keys(m)) {
		out = append(out, retryv1alpha1.PartitionOffset{Partition: p, Offset: m[p]})
	}
	return out
}

// OffsetsFromStatus converts the status form to offsets per partition.
func OffsetsFromStatus(l []retryv1alpha1.PartitionOffset) map[int32]int64 {
	out := make(map[int32]int64, len(l))
	for _, po := range l {
		out[po.Partition] = po.Offset
	}
	return out
}

func refs(ids []ID) []retryv1alpha1.RecordRef {
	if len(ids) == 0 {
		return nil
	}
	out := make([]retryv1alpha1.RecordRef, 0, min(len(ids), retryv1alpha1.MaxListedRecords))
	for _, id := range ids[:min(len(ids), retryv1alpha1.MaxListedRecords)] {
		out = append(out, retryv1alpha1.RecordRef(id.String()))
	}
	return out
}

// Snapshot captures the end offset of every partition of the dead letter topic: what an action
// covers, taken once when it starts (keep it in status.snapshot with OffsetsToStatus). A missing
// topic is an error matching kafka.ErrTopicNotFound.
func Snapshot(ctx context.Context, admin kafka.Admin, dlqTopic string) (map[int32]int64, error) {
	offs, err := admin.ListOffsets(ctx, dlqTopic)
	if err != nil {
		return nil, err
	}
	parts, ok := offs[dlqTopic]
	if !ok {
		return nil, kafka.NewError("snapshot", kafka.KindTopicNotFound, fmt.Errorf("%w: %s", kafka.ErrTopicNotFound, dlqTopic), "")
	}
	out := make(map[int32]int64, len(parts))
	for _, p := range parts {
		out[p.Partition] = p.End
	}
	return out, nil
}
