package deadletters_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/sdk/headers"
)

// maxInASecond returns the most records produced in any second [t, t+1s) of the produce calls at
// times at with sizes (the windows that matter start at a produce).
func maxInASecond(at []time.Time, sizes []int) int {
	most := 0
	for i := range at {
		n := 0
		for j := range at {
			if !at[j].Before(at[i]) && at[j].Before(at[i].Add(time.Second)) {
				n += sizes[j]
			}
		}
		most = max(most, n)
	}
	return most
}

// A Replay at 50 records a second lets at most 50 records through in any second, also when its scan
// falls behind the schedule (a slow lookup of a target: the limiter must not catch up with a burst)
// and when progress reports flush partial batches; its batches stay at most rate/10 records.
func TestReplayLetsAtMostTheRateThroughInAnySecond(t *testing.T) {
	for _, tc := range []struct {
		name          string
		progressEvery int
		stallAt       int64 // the stallAt-th target lookup (from 1) takes 1.5s; 0: none
	}{
		{name: "a target lookup stalls the scan for 1.5s", stallAt: 6},
		{name: "progress reports flush partial batches", progressEvery: 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var dls []dl
			for i := range 60 {
				dls = append(dls, dl{partition: int32(i % partitions), reason: headers.ReasonMaxRetriesExceeded, errType: "TimeoutError", pipeline: ordersPipe})
			}
			e.seed(dls)
			clk := newVirtualClock()
			e.kafka.clk = clk
			var lookups atomic.Int64
			target := func(ctx context.Context, en *deadletters.Entry) (deadletters.Target, error) {
				if lookups.Add(1) == tc.stallAt {
					clk.advance(1500 * time.Millisecond)
				}
				return e.toOrdersTier(ctx, en)
			}
			prog, err := deadletters.Run(ctxT(t), deadletters.Options{
				Spec: replaySpec(50), Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: e.snapshot(),
				Target: target, Holders: testLedger, Clock: clk, ProgressEvery: tc.progressEvery,
			})
			if err != nil || prog.Done != 60 {
				t.Fatalf("Run: %+v %v", prog, err)
			}
			e.kafka.mu.Lock()
			defer e.kafka.mu.Unlock()
			first, last := e.kafka.tierAt[0], e.kafka.tierAt[len(e.kafka.tierAt)-1]
			t.Logf("%d produces of %v records over %v", len(e.kafka.tierAt), e.kafka.tierSizes, last.Sub(first))
			if most := maxInASecond(e.kafka.tierAt, e.kafka.tierSizes); most > 50 {
				t.Errorf("%d records in one second, want at most 50", most)
			}
			for i, n := range e.kafka.tierSizes {
				if n > 5 {
					t.Errorf("produce %d of %d records, want at most rate/10 = 5", i, n)
				}
			}
		})
	}
}
