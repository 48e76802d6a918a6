package deadletters

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"k8s.io/utils/clock"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/kafka"
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
		limit = v1.DefaultMaxReplays
	}
	if prev >= limit || prev >= headers.MaxReplayCount {
		r.prog.skip(SkipReplayLimit)
		return false, nil
	}
	target, err := r.o.Target(ctx, e)
	if errors.Is(err, ErrNoTarget) {
		r.prog.skip(SkipNoTarget)
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("replay target of %s: %w", e.ID, err)
	}
	hs := make([]headers.Header, len(e.Headers))
	for i, h := range e.Headers {
		hs[i] = headers.Header(h)
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

// limiter lets the n-th record (from 0) of a run go at start + n/rate: a batch waits for the time of
// its last record.
type limiter struct {
	clk   clock.Clock
	rate  float64
	start time.Time
	n     int64
}

func (l *limiter) wait(ctx context.Context, batch int) error {
	if l.n == 0 {
		l.start = l.clk.Now()
	}
	due := l.start.Add(time.Duration(float64(l.n+int64(batch)-1) / l.rate * float64(time.Second)))
	l.n += int64(batch)
	d := due.Sub(l.clk.Now())
	if d <= 0 {
		return ctx.Err()
	}
	t := l.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C():
		return nil
	}
}
