package deadletters_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/sdk/headers"
)

func TestDryRunChangesNothing(t *testing.T) {
	e := newEnv(t)
	e.seed(mixed(300))
	want, noTarget := e.expectedReplays()
	snap := e.snapshot()
	before := time.Now().Add(time.Hour)
	for _, spec := range []retryv1alpha1.DeadLetterActionSpec{
		replaySpec(1),
		{Action: retryv1alpha1.DeadLetterResolve, Note: "n", RequestedBy: "jane", Selector: replaySpec(1).Selector},
		{Action: retryv1alpha1.DeadLetterPurge, RequestedBy: "jane", Selector: &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: before}, States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterResolved}}},
	} {
		spec.Mode = retryv1alpha1.ActionModeDryRun
		prog, err := deadletters.Run(ctxT(t), deadletters.Options{Spec: spec, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap, Target: e.toOrdersTier, Holders: testLedger})
		if err != nil {
			t.Fatalf("%s: %v", spec.Action, err)
		}
		switch spec.Action {
		case retryv1alpha1.DeadLetterReplay:
			if prog.Done != int64(len(want)) || prog.SkippedBy[deadletters.SkipNoTarget] != int64(len(noTarget)) || len(prog.MatchedRecords) != min(len(want), retryv1alpha1.MaxListedRecords) {
				t.Errorf("dry replay: %+v", prog)
			}
		case retryv1alpha1.DeadLetterResolve:
			if prog.Done != int64(len(want)+len(noTarget)) {
				t.Errorf("dry resolve: done %d, want %d", prog.Done, len(want)+len(noTarget))
			}
		case retryv1alpha1.DeadLetterPurge:
			// Everything is Pending: the first dead letter of each partition blocks.
			if prog.Done != 0 || len(prog.Blocking) != partitions {
				t.Errorf("dry purge: %+v", prog)
			}
		}
	}
	if n := e.kafka.count(tierTopic); n != 0 {
		t.Errorf("dry runs produced %d replays", n)
	}
	state, _ := deadletters.StateTopic(dlqTopic)
	if n := e.kafka.count(state); n != 0 || len(e.readAll(state)) != 0 {
		t.Errorf("dry runs wrote %d states", n)
	}
	for p, s := range e.starts() {
		if s != 0 {
			t.Errorf("partition %d starts at %d after dry runs", p, s)
		}
	}
}

func TestResolveAndIgnoreRecordTheirDecisions(t *testing.T) {
	e := newEnv(t)
	ids := e.seed(mixed(90))
	snap := e.snapshot()
	resolve := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterResolve, Note: "fixed upstream", RequestedBy: "jane",
		Selector: &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{headers.ReasonNonRetriable}}}
	ignore := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterIgnore, Note: "test traffic", RequestedBy: "joe",
		Selector: &retryv1alpha1.DeadLetterSelector{Records: []retryv1alpha1.RecordRef{retryv1alpha1.RecordRef(ids[0].String()), retryv1alpha1.RecordRef(ids[1].String()), retryv1alpha1.RecordRef(ids[3].String())}}}
	resRef := deadletters.ActionRef{Namespace: "shop", Name: "resolve", UID: "u-res"}
	ignRef := deadletters.ActionRef{Namespace: "shop", Name: "ignore", UID: "u-ign"}
	prog, err := deadletters.Run(ctxT(t), deadletters.Options{Spec: resolve, Ref: resRef, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap})
	if err != nil || prog.Done != 30 {
		t.Fatalf("resolve: %+v %v, want 30 done", prog, err)
	}
	// ids[3] is non_retriable_error ((i/2)%3 == 1): already resolved, so skipped.
	prog, err = deadletters.Run(ctxT(t), deadletters.Options{Spec: ignore, Ref: ignRef, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap})
	if err != nil || prog.Done != 2 || prog.SkippedBy[deadletters.SkipAlreadyResolved] != 1 {
		t.Fatalf("ignore: %+v %v, want 2 done and 1 already resolved", prog, err)
	}
	st := e.states()
	if len(st.ByID) != 32 {
		t.Errorf("%d states, want 32", len(st.ByID))
	}
	for i, id := range ids {
		s := st.Get(id)
		switch {
		case i == 0 || i == 1:
			if s.State != retryv1alpha1.DeadLetterIgnored || s.Note != "test traffic" || s.RequestedBy != "joe" || s.Action != ignRef || s.Time.IsZero() {
				t.Errorf("dead letter %d: %+v, want Ignored by joe", i, s)
			}
		case (i/2)%3 == 1:
			if s.State != retryv1alpha1.DeadLetterResolved || s.Note != "fixed upstream" || s.RequestedBy != "jane" || s.Action != resRef {
				t.Errorf("dead letter %d: %+v, want Resolved by jane", i, s)
			}
		default:
			if !s.Pending() {
				t.Errorf("dead letter %d: %+v, want Pending", i, s)
			}
		}
	}
}

func TestPurgeDeletesTheMatchingPrefixAndReportsTheBlocker(t *testing.T) {
	e := newEnv(t)
	cut := seedBase.Add(time.Hour)
	var dls []dl
	// Partition 0: ten dead letters, the last two dead-lettered after the cut.
	for i := range 10 {
		at := seedBase.Add(time.Duration(i) * time.Minute)
		if i >= 8 {
			at = cut.Add(time.Minute)
		}
		dls = append(dls, dl{partition: 0, reason: headers.ReasonNonRetriable, errType: "HTTP400", pipeline: ordersPipe, at: at})
	}
	// Partition 1: ten, the sixth left Pending. Partition 2: five, the first left Pending.
	for i := range 10 {
		dls = append(dls, dl{partition: 1, reason: headers.ReasonNonRetriable, errType: "HTTP400", pipeline: ordersPipe, at: seedBase.Add(time.Duration(i) * time.Minute)})
	}
	for i := range 5 {
		dls = append(dls, dl{partition: 2, reason: headers.ReasonNonRetriable, errType: "HTTP400", pipeline: ordersPipe, at: seedBase.Add(time.Duration(i) * time.Minute)})
	}
	ids := e.seed(dls)
	var resolve, ignore []retryv1alpha1.RecordRef
	for i, id := range ids {
		switch {
		case id.Partition == 1 && id.Offset == 5, id.Partition == 2 && id.Offset == 0:
		case i%2 == 0:
			resolve = append(resolve, retryv1alpha1.RecordRef(id.String()))
		default:
			ignore = append(ignore, retryv1alpha1.RecordRef(id.String()))
		}
	}
	snap := e.snapshot()
	for _, spec := range []retryv1alpha1.DeadLetterActionSpec{
		{Action: retryv1alpha1.DeadLetterResolve, Note: "n", RequestedBy: "jane", Selector: &retryv1alpha1.DeadLetterSelector{Records: resolve}},
		{Action: retryv1alpha1.DeadLetterIgnore, Note: "n", RequestedBy: "jane", Selector: &retryv1alpha1.DeadLetterSelector{Records: ignore}},
	} {
		if _, err := deadletters.Run(ctxT(t), deadletters.Options{Spec: spec, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap}); err != nil {
			t.Fatal(err)
		}
	}
	purge := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterPurge, RequestedBy: "jane",
		Selector: &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: cut}}}
	prog, err := deadletters.Run(ctxT(t), deadletters.Options{Spec: purge, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap})
	if err != nil {
		t.Fatal(err)
	}
	starts := e.starts()
	if starts[0] != 8 || starts[1] != 5 || starts[2] != 0 {
		t.Errorf("start offsets after the purge %v, want 8, 5, 0", starts)
	}
	blocking := map[deadletters.ID]bool{}
	for _, id := range prog.Blocking {
		blocking[id] = true
	}
	if len(blocking) != 3 || !blocking[deadletters.ID{Partition: 0, Offset: 8}] || !blocking[deadletters.ID{Partition: 1, Offset: 5}] || !blocking[deadletters.ID{Partition: 2, Offset: 0}] {
		t.Errorf("blocking %v, want 0/8 (too recent), 1/5 and 2/0 (pending)", prog.Blocking)
	}
	if prog.Done != 13 || prog.Matched != 13 || prog.SkippedBy[deadletters.SkipBlocksPrefix] != 3 {
		t.Errorf("progress %+v, want 13 deleted and 3 blocking", prog)
	}
	// The decisions on the deleted dead letters are gone; the others stay.
	st := e.states()
	for id := range st.ByID {
		if id.Offset < starts[id.Partition] {
			t.Errorf("state of deleted %s kept", id)
		}
	}
	if len(st.ByID) != len(ids)-2-13 {
		t.Errorf("%d states left, want %d", len(st.ByID), len(ids)-2-13)
	}
	// A second purge deletes nothing more and reports the same blockers.
	prog, err = deadletters.Run(ctxT(t), deadletters.Options{Spec: purge, Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: snap})
	if err != nil || prog.Done != 0 || len(prog.Blocking) != 3 {
		t.Errorf("second purge: %+v %v", prog, err)
	}
}

// An unknown DLQ topic, a missing state topic and a bad selector are errors, not panics.
func TestRunRefusesWhatItCannotDo(t *testing.T) {
	e := newEnv(t)
	for name, o := range map[string]deadletters.Options{
		"missing topic":     {Spec: replaySpec(1), Topic: "nope", Conn: e.conn, Kafka: e.kafka, Target: e.toOrdersTier, Holders: testLedger},
		"replay no target":  {Spec: replaySpec(1), Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka},
		"purge pending":     {Spec: retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterPurge, Selector: &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: time.Now()}, States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending}}}, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka},
		"purge no before":   {Spec: retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterPurge}, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka},
		"bad record":        {Spec: retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterIgnore, Selector: &retryv1alpha1.DeadLetterSelector{Records: []retryv1alpha1.RecordRef{"x"}}}, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka},
		"unknown action":    {Spec: retryv1alpha1.DeadLetterActionSpec{Action: "Archive"}, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka},
		"topic, no state t": {Spec: replaySpec(1), Topic: tierTopic, Conn: e.conn, Kafka: e.kafka, Target: e.toOrdersTier, Holders: testLedger},
		"no snapshot":       {Spec: replaySpec(1), Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Target: e.toOrdersTier, Holders: testLedger},
	} {
		if name != "no snapshot" {
			o.Snapshot = map[int32]int64{0: 1}
		}
		_, err := deadletters.Run(ctxT(t), o)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if (name == "no snapshot") != strings.Contains(err.Error(), "no snapshot") {
			t.Errorf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

// With the real clock: 400 dead letters at 200 records/s. The rate is measured between the first
// and the last produce (what the first batch waited for is not counted, nor the scan's setup).
func TestReplayRateWithTheRealClock(t *testing.T) {
	if testing.Short() {
		t.Skip("takes two seconds")
	}
	e := newEnv(t)
	var dls []dl
	for i := range 400 {
		dls = append(dls, dl{partition: int32(i % partitions), reason: headers.ReasonMaxRetriesExceeded, errType: "TimeoutError", pipeline: ordersPipe})
	}
	e.seed(dls)
	e.kafka.clk = clock.RealClock{}
	prog, err := deadletters.Run(ctxT(t), deadletters.Options{Spec: replaySpec(200), Ref: ref, Topic: dlqTopic, Conn: e.conn, Kafka: e.kafka, Snapshot: e.snapshot(), Target: e.toOrdersTier, Holders: testLedger})
	if err != nil || prog.Done != 400 {
		t.Fatalf("%+v %v", prog, err)
	}
	e.kafka.mu.Lock()
	defer e.kafka.mu.Unlock()
	first, last := e.kafka.tierAt[0], e.kafka.tierAt[len(e.kafka.tierAt)-1]
	records := 400 - e.kafka.tierSizes[0]
	rate := float64(records) / last.Sub(first).Seconds()
	t.Logf("%d produces, %d records in %v after the first: %.1f/s", len(e.kafka.tierAt), records, last.Sub(first), rate)
	// The limiter's promise is an upper bound: never faster than the rate, whatever the machine. How
	// close to it a run gets depends on the machine's load, which the fake-clock tests pin exactly.
	if rate > 200*1.02 {
		t.Errorf("measured %.1f records/s, want at most 200", rate)
	}
}
