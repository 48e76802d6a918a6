package deadletters

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// purge deletes, partition by partition, the longest prefix of dead letters that all match (state
// among the selected ones, dead-lettered before selector.before, every other criterion): one
// DeleteRecordsBefore per partition, then tombstones for the decisions on the records deleted, then
// the checkpoint. The first dead letter that does not match ends the prefix and is reported as
// blocking. In DryRun nothing is deleted or written.
func (r *run) purge(ctx context.Context, ranges map[int32]kafka.OffsetRange) error {
	for _, p := range slices.Sorted(maps.Keys(ranges)) {
		if r.full {
			break
		}
		rg := ranges[p]
		end, n, stated, err := r.purgePrefix(ctx, p, rg)
		if err != nil {
			return err
		}
		if !r.dryRun && end > rg.From {
			// The decisions matched were made on the topic as it was when the run started: were it
			// deleted and created again since, the records now at these offsets are others, decided
			// or not. Checked again right before the deletion (Kafka's DeleteRecords names a topic,
			// not its ID).
			if err := r.sameTopic(ctx); err != nil {
				return err
			}
			if err := r.admin.DeleteRecordsBefore(ctx, r.o.Topic, map[int32]int64{p: end}); err != nil {
				return fmt.Errorf("delete the records of partition %d before %d: %w", p, end, err)
			}
			tombstones := make([]StateUpdate, len(stated))
			for i, id := range stated {
				tombstones[i] = StateUpdate{ID: id}
			}
			if len(tombstones) > 0 {
				// The decisions on deleted dead letters are dropped from the record; were this to fail,
				// they would be stale entries of records that no longer exist, which every reader skips.
				if _, err := WriteStates(ctx, r.o.Kafka, r.o.Conn, r.o.Topic, tombstones); err == nil {
					for _, u := range tombstones {
						r.states.Set(u.ID, u.State)
					}
				}
			}
		}
		r.prog.Done += n
		// Blocked or not, the partition is done with: resuming considers it no more.
		if !r.full {
			r.prog.Checkpoint[p] = max(r.prog.Checkpoint[p], rg.To)
		} else {
			r.prog.Checkpoint[p] = max(r.prog.Checkpoint[p], end)
		}
		r.report(false)
	}
	return nil
}

// purgePrefix scans one partition's range until the first dead letter that does not match (or
// maxRecords) and returns where the prefix ends, how many dead letters it holds, and those of them
// with a decision recorded (to be tombstoned): memory proportional to the decisions, not the prefix.
func (r *run) purgePrefix(ctx context.Context, p int32, rg kafka.OffsetRange) (end, n int64, stated []ID, err error) {
	end = rg.To
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := false
	err = r.o.Kafka.Scan(sctx, r.o.Conn, map[string]map[int32]kafka.OffsetRange{r.o.Topic: {p: rg}}, func(rec kafka.Record) {
		if stopped {
			return
		}
		if r.maxRecords > 0 && r.prog.Done+n >= r.maxRecords {
			end, stopped, r.full = rec.Offset, true, true
			cancel()
			return
		}
		e := parse(rec, false)
		st := r.states.Get(e.ID)
		if !r.m.Match(&e, st) {
			end, stopped = e.Offset, true
			r.prog.skip(SkipBlocksPrefix)
			if len(r.prog.Blocking) < retryv1alpha1.MaxListedRecords {
				r.prog.Blocking = append(r.prog.Blocking, e.ID)
			}
			cancel()
			return
		}
		r.prog.Matched++
		n++
		if !st.Pending() {
			stated = append(stated, e.ID)
		}
		if r.dryRun && len(r.prog.MatchedRecords) < retryv1alpha1.MaxListedRecords {
			r.prog.MatchedRecords = append(r.prog.MatchedRecords, e.ID)
		}
	})
	if ourStop := stopped && errors.Is(err, context.Canceled) && ctx.Err() == nil; err != nil && !ourStop {
		return 0, 0, nil, err
	}
	return end, n, stated, nil
}

// errRecreated says the dead letter topic was deleted and created again during the run.
var errRecreated = errors.New("the dead letter topic was deleted and created again since the action started (its topic ID changed): nothing more is deleted; the dead letters of the new topic have no decision yet")

// sameTopic fails with errRecreated when the dead letter topic's ID is no longer the one the run
// started with.
func (r *run) sameTopic(ctx context.Context) error {
	id, err := TopicID(ctx, r.admin, r.o.Topic)
	if err != nil {
		return fmt.Errorf("check the dead letter topic before deleting: %w", err)
	}
	if id != r.topicID {
		return fmt.Errorf("%w (ID %q, was %q)", errRecreated, id, r.topicID)
	}
	return nil
}
