package deadletters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/utils/clock"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// replayable builds the replay of e into p, or skips e (false) with its reason.
func (r *run) replayable(ctx context.Context, e *Entry, st State, p *pending) (bool, error) {
	if !e.ReplayCountValid {
		r.prog.skip(SkipMalformed)
		return false, nil
	}
	prev := max(e.ReplayCount, st.ReplayCount)
	limit := int(r.o.Spec.MaxReplays)
	if limit <= 0 {
		limit = retryv1alpha1.DefaultMaxReplays
	}
	if prev >= limit || prev >= headers.MaxReplayCount {
		r.prog.skip(SkipReplayLimit)
		return false, nil
	}
	target, err := r.o.Target(ctx, e)
	if err == nil && e.OtherPipelineRecord() && !namesTarget(r.o.Spec.Target) {
		err = otherPipelineError(e) // whatever a Target function given by the caller said
	}
	switch {
	case errors.Is(err, ErrOtherPipelineRecord):
		r.prog.skip(SkipOtherPipeline)
		return false, nil
	case errors.Is(err, ErrNoTarget):
		r.prog.skip(SkipNoTarget)
		return false, nil
	}
	if err == nil {
		err = r.checkedTarget(ctx, target)
	}
	if err != nil {
		return false, fmt.Errorf("replay target of %s: %w", e.ID, err)
	}
	hs := make([]headers.Header, 0, len(e.Headers)+1)
	for _, h := range e.Headers {
		if target.Pipeline == "" || h.Key != headers.Pipeline {
			hs = append(hs, headers.Header(h))
		}
	}
	if target.Pipeline != "" {
		// Replayed into another pipeline (spec.target.pipeline), the record is that pipeline's.
		hs = append(hs, headers.Header{Key: headers.Pipeline, Value: []byte(target.Pipeline)})
	}
	built, err := headers.ReplayHeaders(hs, r.o.Topic, e.Partition, e.Offset, r.o.clock().Now())
	if err != nil {
		// The dead letter cannot be replayed (written without its value, no valid
		// retryops.original.* headers): skipped, not a failure of the run.
		reason := SkipMalformed
		switch {
		case errors.Is(err, headers.ErrIncomplete):
			reason = SkipIncomplete
		case errors.Is(err, headers.ErrReplayLimit):
			reason = SkipReplayLimit
		}
		r.prog.skip(reason)
		return false, nil
	}
	rec := kafka.ProduceRecord{Key: cloneBytes(e.Key), Value: cloneBytes(e.Value), Partition: -1}
	rec.Headers = make([]kafka.Header, len(built))
	for i, h := range built {
		if h.Key == headers.ReplayCount {
			// The record of decisions may know of more replays than the dead letter's header.
			h.Value = []byte(strconv.Itoa(prev + 1))
		}
		rec.Headers[i] = kafka.Header{Key: h.Key, Value: cloneBytes(h.Value)}
	}
	p.record, p.target = rec, target
	p.state.ReplayCount = prev + 1
	return true, nil
}

// namesTarget reports whether the action names where its replays go (spec.target).
func namesTarget(t *retryv1alpha1.ReplayTarget) bool {
	return t != nil && (t.Pipeline != "" || t.Topic != "")
}

// produce sends the batch's records, one call per target, setting ok for those acknowledged. A
// record that failed for a reason worth retrying (or the context) stops the run; one refused for
// good (too large, not authorized, no such partition) is counted as failed.
func (r *run) produce(ctx context.Context, ok []bool) error {
	type key struct{ conn, topic string }
	groups := map[key][]int{}
	var order []key
	for i, p := range r.batch {
		k := key{p.target.Conn.Key(), p.target.Topic}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		recs := make([]kafka.ProduceRecord, len(idx))
		for j, i := range idx {
			recs[j] = r.batch[i].record
		}
		target := r.batch[idx[0]].target
		res, err := r.o.Kafka.ProduceRecords(ctx, target.Conn, target.Topic, recs)
		if res == nil {
			return fmt.Errorf("replay to %s: %w", target.Topic, err)
		}
		for j, i := range idx {
			switch e := res[j].Err; {
			case e == nil:
				ok[i] = true
				if r.possibleDups > 0 {
					r.possibleDups--
					r.prog.Duplicates++
				}
			case ctx.Err() != nil || kafka.IsRetriable(e) || kafka.IsUnreachable(e):
				return fmt.Errorf("replay %s to %s: %w", r.batch[i].id, target.Topic, e)
			default:
				r.prog.Failed++
			}
		}
	}
	return nil
}

// limiter paces a Replay at rate records a second, a batch at a time:
//   - no more than rate records go in any second: a batch waits until a second has passed since
//     the record rate places before its last one went;
//   - the n-th record (from 0) goes no earlier than its slot, n/rate after the first, and a batch at
//     the slot of its last record, so records flow evenly through the second;
//   - a run that fell behind its slots (a slow scan, a slow Kafka) makes up at most one batch of it:
//     the slots restart from now, never releasing what it owes at once.
type limiter struct {
	clk  clock.Clock
	rate float64
	next time.Time   // the slot of the next record; zero before the first batch
	n    int64       // records let through
	sent []sentBatch // the batches let through in the last second, oldest first
}

// sentBatch is a batch the limiter let through: records [first, end) at at.
type sentBatch struct {
	at         time.Time
	first, end int64
}

// slots is the time k records take at the rate.
func (l *limiter) slots(k int) time.Duration {
	return time.Duration(float64(k) / l.rate * float64(time.Second))
}

// wait returns when the next batch of batch records may go (or ctx ended), and counts them as gone.
func (l *limiter) wait(ctx context.Context, batch int) error {
	now := l.clk.Now()
	if l.next.IsZero() {
		l.next = now
	} else if floor := now.Add(-l.slots(batch)); l.next.Before(floor) {
		l.next = floor
	}
	due := l.next.Add(l.slots(batch - 1))
	for len(l.sent) > 0 && !l.sent[0].at.Add(time.Second).After(now) {
		l.sent = l.sent[1:]
	}
	// The record rate places before the batch's last one (a dropped batch went over a second ago).
	if before := l.n + int64(batch) - 1 - int64(l.rate); before >= 0 {
		for _, b := range l.sent {
			if b.first <= before && before < b.end {
				if w := b.at.Add(time.Second); w.After(due) {
					due = w
				}
				break
			}
		}
	}
	if d := due.Sub(now); d > 0 {
		t := l.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C():
		}
	} else if err := ctx.Err(); err != nil {
		return err
	}
	at := l.clk.Now()
	if at.Before(due) {
		at = due
	}
	l.sent = append(l.sent, sentBatch{at: at, first: l.n, end: l.n + int64(batch)})
	l.n += int64(batch)
	l.next = due.Add(l.slots(1))
	return nil
}
