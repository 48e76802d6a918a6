package dispatcher

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// commitRetryWait is the pause before a failed commit is tried again.
const commitRetryWait = 500 * time.Millisecond

type commitEntry struct {
	ps      *partState
	offset  int64
	release int // slots the commit releases: the records popped before it was collected
}

// collectLocked returns the offsets to commit for the given partitions (all when nil) and updates
// the lag gauges.
func (e *Engine) collectLocked(only []*partState) (map[string]map[int32]kgo.EpochOffset, []commitEntry) {
	var offsets map[string]map[int32]kgo.EpochOffset
	var entries []commitEntry
	parts := only
	if parts == nil {
		parts = e.order
	}
	for _, ps := range parts {
		e.lagLocked(ps)
		offset, epoch, release, ok := ps.committable()
		if !ok {
			continue
		}
		if offsets == nil {
			offsets = map[string]map[int32]kgo.EpochOffset{}
		}
		if offsets[ps.topic] == nil {
			offsets[ps.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[ps.topic][ps.partition] = kgo.EpochOffset{Epoch: epoch, Offset: offset}
		entries = append(entries, commitEntry{ps, offset, release})
	}
	return offsets, entries
}

// commit commits offsets synchronously and records what was committed.
func (e *Engine) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset, entries []commitEntry) error {
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	e.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		failed := map[tpKey]bool{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					failed[tpKey{t.Topic, p.Partition}] = true
					cerr = perr
				}
			}
		}
		e.mu.Lock()
		for _, c := range entries {
			if !failed[c.ps.tpKey] {
				released := c.ps.committedTo(c.offset, c.release)
				e.slots -= released
				if c.ps.tier == 0 {
					e.srcDone -= released
				}
			}
		}
		e.scheduleLocked() // released slots may start deliveries
		e.mu.Unlock()
	})
	if cerr != nil {
		e.m.CommitErrors.Inc()
		e.kafkaFailed(whereGroup, cerr, false)
	} else {
		e.kafkaOKAt(whereGroup)
	}
	return cerr
}

// commitParts commits what finished in the given partitions (all when nil; that commit also
// clears the committer's pending wake-ups), one commit at a time. It returns the number of
// partitions it had offsets for.
func (e *Engine) commitParts(ctx context.Context, only []*partState) (int, error) {
	select { // one commit at a time; waiting for the one under way is bounded by ctx
	case e.commitSem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-e.commitSem }()
	e.mu.Lock()
	if only == nil {
		e.commitPending, e.pressureKicked = false, false
	}
	offsets, entries := e.collectLocked(only)
	e.mu.Unlock()
	return len(entries), e.commit(ctx, offsets, entries)
}

// commitLoop commits what finished, one commit at a time: at most every commitInterval on the
// engine's clock, but at once when half of maxUncommitted finished records wait for their commit
// (so that the interval never throttles deliveries).
func (e *Engine) commitLoop(ctx context.Context) {
	var last time.Time
	timer := e.stoppedTimer()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.commitKick:
		}
		for e.commitInterval > 0 {
			wait := e.commitInterval - e.clock.Since(last)
			if wait <= 0 || e.commitPressure() {
				break
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C():
			case <-e.commitKick: // the slots came under pressure
				stopTimer(timer)
			}
		}
		last = e.clock.Now()
		n, err := e.commitParts(ctx, nil)
		if n > 0 {
			e.log.Debug("Committed offsets", "partitions", n, "took", e.clock.Since(last), "error", err)
		}
		if err != nil && ctx.Err() == nil {
			e.log.Warn("Committing offsets failed; retrying", "error", err)
			go func() {
				if e.sleep(ctx, commitRetryWait) {
					kick(e.commitKick)
				}
			}()
		}
	}
}

// commitPressure reports whether half of maxUncommitted finished records of the source topic wait
// for their commit (retry tiers are bounded by their look-ahead window instead).
func (e *Engine) commitPressure() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pressureLocked()
}

func (e *Engine) pressureLocked() bool { return 2*e.srcDone >= e.maxUncommitted }
