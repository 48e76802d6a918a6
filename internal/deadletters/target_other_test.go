package deadletters_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// otherPipelineFixture is a queue of three dead letters of pipeline shop/orders on the fake: 0/0
// the dispatcher's refusal of a record of another pipeline's retry tier (reason malformed, error
// type OtherPipelineRecord), 0/1 an ordinary one, 0/2 one whose sink answered with that error type
// (a sink's type, not the dispatcher's word).
func otherPipelineFixture(t *testing.T) (*kafkafake.Fake, kafka.Connection) {
	t.Helper()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	f := kafkafake.New()
	state, _ := deadletters.StateTopic(dlqTopic)
	for _, tp := range []string{dlqTopic, state, tierTopic, "orders"} {
		f.AddTopic(tp, 1, 1, nil)
	}
	dl := func(key, reason, errorType string) kafka.ProduceRecord {
		return kafka.ProduceRecord{Key: []byte(key), Value: []byte(key), Headers: []kafka.Header{
			{Key: headers.Pipeline, Value: []byte(ordersPipe)},
			{Key: headers.OriginalTopic, Value: []byte("orders")}, {Key: headers.OriginalPartition, Value: []byte("0")},
			{Key: headers.OriginalOffset, Value: []byte("9")}, {Key: headers.OriginalTimestamp, Value: []byte("2030-01-01T00:00:00Z")},
			{Key: headers.Reason, Value: []byte(reason)}, {Key: headers.ErrorType, Value: []byte(errorType)},
		}}
	}
	recs := []kafka.ProduceRecord{
		dl("foreign", headers.ReasonMalformed, headers.ErrorTypeOtherPipeline),
		dl("own", headers.ReasonMaxRetriesExceeded, "HTTP500"),
		dl("sink-typed", headers.ReasonNonRetriable, headers.ErrorTypeOtherPipeline),
	}
	if _, err := f.ProduceRecords(context.Background(), conn, dlqTopic, recs); err != nil {
		t.Fatal(err)
	}
	return f, conn
}

// TestDefaultReplaySkipsAnotherPipelinesRecord: the dispatcher dead-letters a record of another
// pipeline's retry tier under its own pipeline's name (the record's header is untrusted), so a
// Replay without spec.target, which replays by that name, would deliver it to the sink it was kept
// from. It is skipped (OtherPipelineRecord), nothing written for it, the Target function saying to
// set spec.target; the other dead letters are replayed. A target the action names replays it.
func TestDefaultReplaySkipsAnotherPipelinesRecord(t *testing.T) {
	ctx := context.Background()
	state, _ := deadletters.StateTopic(dlqTopic)
	run := func(f *kafkafake.Fake, conn kafka.Connection, target *retryv1alpha1.ReplayTarget, uid string) (deadletters.Progress, error) {
		lookup := func(_ context.Context, ns, name string) (deadletters.Target, error) {
			if ns+"/"+name == ordersPipe {
				return deadletters.Target{Topic: tierTopic, Conn: conn}, nil
			}
			return deadletters.Target{}, deadletters.ErrNoTarget
		}
		spec := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "jane", Target: target}
		return deadletters.Run(ctx, deadletters.Options{
			Spec: spec, Ref: deadletters.ActionRef{Namespace: "shop", Name: "replay-" + uid, UID: uid}, Topic: dlqTopic, Conn: conn, Kafka: f, Snapshot: map[int32]int64{0: 3},
			Target: deadletters.Targets(spec.Target, "shop", conn, lookup), Holders: testLedger,
		})
	}
	keys := func(rs []kafka.Record) (out []string) {
		for _, r := range rs {
			out = append(out, string(r.Key))
		}
		return out
	}

	f, conn := otherPipelineFixture(t)
	prog, err := run(f, conn, nil, "uid-1")
	if err != nil {
		t.Fatal(err)
	}
	if prog.Matched != 3 || prog.Done != 2 || prog.Skipped != 1 || prog.SkippedBy[deadletters.SkipOtherPipeline] != 1 {
		t.Errorf("default replay: progress %+v, want 2 replayed and 1 skipped as %s", prog, deadletters.SkipOtherPipeline)
	}
	if got := keys(f.Records(tierTopic, 0)); strings.Join(got, ",") != "own,sink-typed" {
		t.Errorf("default replay wrote %q to the tier, want only own and sink-typed", got)
	}
	for _, st := range f.Records(state, 0) {
		if string(st.Key) == "0/0" {
			t.Errorf("a decision was recorded for the skipped dead letter: %s", st.Value)
		}
	}
	e := &deadletters.Entry{Pipeline: ordersPipe, Reason: headers.ReasonMalformed, ErrorType: headers.ErrorTypeOtherPipeline}
	_, err = deadletters.Targets(nil, "shop", conn, func(context.Context, string, string) (deadletters.Target, error) {
		return deadletters.Target{Topic: tierTopic, Conn: conn}, nil
	})(ctx, e)
	if !errors.Is(err, deadletters.ErrNoTarget) || !strings.Contains(err.Error(), "spec.target") {
		t.Errorf("the default target of such a dead letter: %v, want ErrNoTarget saying to set spec.target", err)
	}

	// A Target function of the caller's own that replays by retryops.pipeline: Run skips it still.
	f2, conn2 := otherPipelineFixture(t)
	prog, err = deadletters.Run(ctx, deadletters.Options{
		Spec: retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "jane"}, Ref: ref, Topic: dlqTopic, Conn: conn2, Kafka: f2,
		Snapshot: map[int32]int64{0: 3}, Holders: testLedger,
		Target: func(context.Context, *deadletters.Entry) (deadletters.Target, error) {
			return deadletters.Target{Topic: tierTopic, Conn: conn2, Pipeline: ordersPipe}, nil
		},
	})
	if err != nil || prog.SkippedBy[deadletters.SkipOtherPipeline] != 1 || len(f2.Records(tierTopic, 0)) != 2 {
		t.Errorf("a Target function routing by the header: %v, progress %+v, %d replayed; want it skipped", err, prog, len(f2.Records(tierTopic, 0)))
	}

	// The action names the pipeline: the skipped dead letter is replayed, into that pipeline's tier.
	prog, err = run(f, conn, &retryv1alpha1.ReplayTarget{Pipeline: "orders"}, "uid-2")
	if err != nil {
		t.Fatal(err)
	}
	if prog.Done != 1 || prog.SkippedBy[deadletters.SkipOtherPipeline] != 0 {
		t.Errorf("replay to a named pipeline: progress %+v, want the skipped dead letter replayed", prog)
	}
	if got := keys(f.Records(tierTopic, 0)); strings.Join(got, ",") != "own,sink-typed,foreign" {
		t.Errorf("the tier holds %q, want own, sink-typed, foreign", got)
	}

	// The action names a topic: replayed there.
	f, conn = otherPipelineFixture(t)
	prog, err = run(f, conn, &retryv1alpha1.ReplayTarget{Topic: "orders"}, "uid-3")
	if err != nil {
		t.Fatal(err)
	}
	if prog.Done != 3 || prog.Skipped != 0 || len(f.Records("orders", 0)) != 3 || len(f.Records(tierTopic, 0)) != 0 {
		t.Errorf("replay to a named topic: progress %+v, %d records in it, want all 3", prog, len(f.Records("orders", 0)))
	}
}
