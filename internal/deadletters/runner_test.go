package deadletters_test

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/sdk/headers"
)

var (
	reasons    = []string{headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable, headers.ReasonDeadlineExceeded}
	errorTypes = []string{"TimeoutError", "HTTP503", "ConnectionError", "HTTP400"}
)

// mixed returns n dead letters over the partitions, with the reasons and error types cycling at
// different periods and one in seven from another pipeline.
func mixed(n int) []dl {
	out := make([]dl, n)
	for i := range out {
		out[i] = dl{partition: int32(i % partitions), reason: reasons[(i/2)%3], errType: errorTypes[(i/5)%4], pipeline: ordersPipe}
		if i%7 == 0 {
			out[i].pipeline = "shop/other"
		}
	}
	return out
}

func replaySpec(rate int32) retryv1alpha1.DeadLetterActionSpec {
	return retryv1alpha1.DeadLetterActionSpec{
		Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "jane", MaxReplays: 3,
		Selector: &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{headers.ReasonMaxRetriesExceeded}, ErrorTypes: []retryv1alpha1.DeadLetterName{"TimeoutError"}},
		Rate:     &retryv1alpha1.ReplayRate{RecordsPerSecond: rate},
	}
}

var ref = deadletters.ActionRef{Namespace: "shop", Name: "replay-1", UID: "uid-1"}

// expectedReplays is an independent scan of the dead letter topic (its raw headers, not Entry):
// the dead letters of reason max_retries_exceeded and error type TimeoutError, split by whether
// their pipeline has a target.
func (e *env) expectedReplays() (withTarget, without map[string]bool) {
	withTarget, without = map[string]bool{}, map[string]bool{}
	for _, r := range e.readAll(dlqTopic) {
		reason, _ := header(r, headers.Reason)
		et, _ := header(r, headers.ErrorType)
		pipe, _ := header(r, headers.Pipeline)
		if reason != headers.ReasonMaxRetriesExceeded || et != "TimeoutError" {
			continue
		}
		id := headers.FormatReplayOf(dlqTopic, r.Partition, r.Offset)
		if pipe == ordersPipe {
			withTarget[id] = true
		} else {
			without[id] = true
		}
	}
	return withTarget, without
}

// replayedOf reads the tier and counts its records per retryops.replay.of.
func (e *env) replayedOf() map[string]int {
	out := map[string]int{}
	for _, r := range e.readAll(tierTopic) {
		of, _ := header(r, headers.ReplayOf)
		out[of]++
	}
	return out
}

func TestReplayProducesExactlyTheMatchingDeadLettersAtTheRate(t *testing.T) {
	e := newEnv(t)
	e.seed(mixed(1000))
	want, noTarget := e.expectedReplays()
	if len(want) < 50 || len(noTarget) == 0 {
		t.Fatalf("seed gives %d replays and %d without target", len(want), len(noTarget))
	}
	clk := newVirtualClock()
	e.kafka.clk = clk
	var reports []deadletters.Progress
	snap := e.snapshot()
	start := clk.Now()
	prog, err := deadletters.Run(ctxT(t), deadletters.Options{
		Spec: replaySpec(200), Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap,
		Target: e.toOrdersTier, Holders: testLedger, Clock: clk, ProgressEvery: 100,
		OnProgress: func(p deadletters.Progress) { reports = append(reports, p) },
	})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	// Exactly the matching ones, once each.
	got := e.replayedOf()
	if len(got) != len(want) {
		t.Errorf("replayed %d distinct dead letters, want %d", len(got), len(want))
	}
	for id := range want {
		if got[id] != 1 {
			t.Errorf("%s replayed %d times, want once", id, got[id])
		}
	}
	wantMatched := int64(len(want) + len(noTarget))
	if prog.Matched != wantMatched || prog.Done != int64(len(want)) || prog.Skipped != int64(len(noTarget)) ||
		prog.SkippedBy[deadletters.SkipNoTarget] != int64(len(noTarget)) || prog.Failed != 0 || prog.Duplicates != 0 || !prog.Complete {
		t.Errorf("progress %+v, want matched %d, done %d, skipped %d (NoTarget)", prog, wantMatched, len(want), len(noTarget))
	}
	for p, end := range snap {
		if prog.Checkpoint[p] != end {
			t.Errorf("checkpoint of partition %d is %d, want the snapshot end %d", p, prog.Checkpoint[p], end)
		}
	}
	// Progress while it ran: more than the final report, counts growing.
	if len(reports) < 4 || !reports[len(reports)-1].Complete {
		t.Errorf("%d progress reports, the last complete: want several", len(reports))
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].Done < reports[i-1].Done {
			t.Errorf("report %d: done went from %d to %d", i, reports[i-1].Done, reports[i].Done)
		}
	}
	// The limiter's schedule: the records of each produce go no earlier than n/rate after the
	// first, and the whole replay takes (N-1)/rate: 200 records/s within 10%.
	e.kafka.mu.Lock()
	sent := 0
	for i, at := range e.kafka.tierAt {
		last := sent + e.kafka.tierSizes[i] - 1
		if earliest := start.Add(time.Duration(float64(last) / 200 * float64(time.Second))); at.Before(earliest) {
			t.Errorf("produce %d (records %d..%d) at %v, before %v", i, sent, last, at.Sub(start), earliest.Sub(start))
		}
		sent += e.kafka.tierSizes[i]
	}
	elapsed := e.kafka.tierAt[len(e.kafka.tierAt)-1].Sub(start)
	e.kafka.mu.Unlock()
	if rate := float64(sent-1) / elapsed.Seconds(); math.Abs(rate-200)/200 > 0.1 {
		t.Errorf("replayed %d records in %v: %.1f/s, want 200 within 10%%", sent, elapsed, rate)
	}

	// The records follow the replay contract.
	for _, r := range e.readAll(tierTopic) {
		of, _ := header(r, headers.ReplayOf)
		if _, _, _, err := headers.ParseReplayOf(of); err != nil {
			t.Fatalf("replay.of %q: %v", of, err)
		}
		i, _ := strconv.Atoi(string(r.Key[1:]))
		if string(r.Value) != "v"+strconv.Itoa(i) {
			t.Errorf("%s: key %q value %q", of, r.Key, r.Value)
		}
		for name, wantV := range map[string]string{
			"tenant": "eu", headers.ReplayCount: "1", headers.Attempts: "0", headers.OriginalTopic: "orders",
			headers.OriginalOffset: strconv.Itoa(1000 + i),
		} {
			if v, _ := header(r, name); v != wantV {
				t.Errorf("%s: header %s = %q, want %q", of, name, v, wantV)
			}
		}
		if _, ok := header(r, headers.Reason); ok {
			t.Errorf("%s carries the dead letter's retryops.reason", of)
		}
		if due, _ := header(r, headers.Due); due == "" {
			t.Errorf("%s has no retryops.due", of)
		}
	}

	// Their entries show Replayed, with the action and a replay count of 1.
	st := e.states()
	if len(st.ByID) != len(want) || st.Invalid != 0 {
		t.Errorf("%d states (%d invalid), want %d", len(st.ByID), st.Invalid, len(want))
	}
	for id, s := range st.ByID {
		if s.State != retryv1alpha1.DeadLetterReplayed || s.ReplayCount != 1 || s.Action != ref || s.RequestedBy != "jane" {
			t.Errorf("state of %s: %+v", id, s)
		}
		if !want[headers.FormatReplayOf(dlqTopic, id.Partition, id.Offset)] {
			t.Errorf("state for %s, which was not to be replayed", id)
		}
	}

	// The same action again (a new one with the same selector) finds them Replayed and skips them.
	again, err := deadletters.Run(ctxT(t), deadletters.Options{
		Spec: replaySpec(10000), Ref: deadletters.ActionRef{Namespace: "shop", Name: "replay-2", UID: "uid-2"},
		Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: e.snapshot(), Target: e.toOrdersTier, Holders: testLedger, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	if again.Done != 0 || again.SkippedBy[deadletters.SkipAlreadyReplayed] != int64(len(want)) {
		t.Errorf("second replay: %+v, want every one skipped as AlreadyReplayed", again)
	}
}

// A replayed record that comes back to the queue is beyond the snapshot: the running action does
// not pick it up. A Replay selecting Replayed dead letters counts replays up to maxReplays.
func TestReplayKeepsToItsSnapshotAndTheReplayLimit(t *testing.T) {
	e := newEnv(t)
	e.seed([]dl{{partition: 0, reason: headers.ReasonMaxRetriesExceeded, errType: "TimeoutError", pipeline: ordersPipe}})
	snap := e.snapshot()
	spec := replaySpec(10000)
	spec.MaxReplays = 2
	spec.Selector.States = []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending, retryv1alpha1.DeadLetterReplayed}
	returned := false
	e.kafka.produceHook = func(topic string) {
		if topic == tierTopic && !returned {
			returned = true
			// The replay fails again at once and returns to the queue, beyond the snapshot.
			e.seed([]dl{{partition: 0, reason: headers.ReasonMaxRetriesExceeded, errType: "TimeoutError", pipeline: ordersPipe}})
		}
	}
	for run, wantDone := range []int64{1, 1, 0} {
		prog, err := deadletters.Run(ctxT(t), deadletters.Options{
			Spec: spec, Ref: deadletters.ActionRef{UID: "uid-" + strconv.Itoa(run)}, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka,
			Snapshot: snap, Target: e.toOrdersTier, Holders: testLedger,
		})
		if err != nil {
			t.Fatal(err)
		}
		if prog.Matched != 1 || prog.Done != wantDone {
			t.Errorf("run %d: %+v, want 1 matched, %d done", run, prog, wantDone)
		}
		if run == 2 && prog.SkippedBy[deadletters.SkipReplayLimit] != 1 {
			t.Errorf("run %d: %+v, want the dead letter skipped at the replay limit", run, prog)
		}
	}
	if n := e.kafka.count(tierTopic); n != 2 {
		t.Errorf("%d replays produced, want 2 (maxReplays)", n)
	}
	counts := map[string]bool{}
	for _, r := range e.readAll(tierTopic) {
		c, _ := header(r, headers.ReplayCount)
		counts[c] = true
	}
	if !counts["1"] || !counts["2"] {
		t.Errorf("replay counts %v, want 1 and 2", counts)
	}
}

func TestResumeFromACheckpointProducesNoRecordTwiceExceptInFlight(t *testing.T) {
	e := newEnv(t)
	e.seed(mixed(1500))
	want, _ := e.expectedReplays()
	snap := e.snapshot()
	spec := replaySpec(10000)
	status := &retryv1alpha1.DeadLetterActionStatus{Snapshot: deadletters.OffsetsToStatus(snap)}

	// First run: stopped (ctx canceled) from the progress callback once 40 are done.
	ctx, cancel := context.WithCancel(ctxT(t))
	_, err := deadletters.Run(ctx, deadletters.Options{
		Spec: spec, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap, Target: e.toOrdersTier, Holders: testLedger, ProgressEvery: 10,
		OnProgress: func(p deadletters.Progress) {
			p.ApplyTo(status)
			if p.Done >= 40 {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v, want canceled", err)
	}
	if status.Done < 40 || int(status.Done) >= len(want) {
		t.Fatalf("first run stopped at done %d of %d", status.Done, len(want))
	}
	// Second run: a state write fails after the produce was acknowledged (a crash between the two).
	e.kafka.mu.Lock()
	e.kafka.failStates = 1
	e.kafka.mu.Unlock()
	prog, err := deadletters.Run(ctxT(t), deadletters.Options{
		Spec: spec, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: deadletters.OffsetsFromStatus(status.Snapshot),
		Resume: deadletters.FromStatus(status), Target: e.toOrdersTier, Holders: testLedger, OnProgress: func(p deadletters.Progress) { p.ApplyTo(status) },
	})
	if err == nil {
		t.Fatal("the injected state write failure did not stop the run")
	}
	prog.ApplyTo(status)
	// Third run: to the end.
	prog, err = deadletters.Run(ctxT(t), deadletters.Options{
		Spec: spec, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: deadletters.OffsetsFromStatus(status.Snapshot),
		Resume: deadletters.FromStatus(status), Target: e.toOrdersTier, Holders: testLedger,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := e.replayedOf()
	dups := 0
	for id := range want {
		switch n := got[id]; {
		case n == 0:
			t.Errorf("%s never replayed", id)
		case n > 1:
			dups += n - 1
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d distinct replays, want %d", len(got), len(want))
	}
	if dups > deadletters.MaxReplayBatch || int64(dups) > prog.Duplicates {
		t.Errorf("%d records produced twice, status says at most %d (bound %d)", dups, prog.Duplicates, deadletters.MaxReplayBatch)
	}
	if dups == 0 {
		t.Error("the failed state write left no record in flight: the test proves nothing")
	}
	if prog.Done != int64(len(want)) || !prog.Complete {
		t.Errorf("final progress %+v, want done %d", prog, len(want))
	}
	t.Logf("duplicates: %d measured, %d reported", dups, prog.Duplicates)
}
