package deadletters_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/headers"
)

// The default target is the dead letter's own pipeline in the action's namespace, looked up once; a
// pipeline of another namespace, none, or an unknown one is no target; spec.target overrides.
func TestTargets(t *testing.T) {
	ctx := context.Background()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	lookups := map[string]int{}
	tier := func(_ context.Context, ns, name string) (deadletters.Target, error) {
		lookups[ns+"/"+name]++
		switch name {
		case "orders":
			return deadletters.Target{Topic: "shop.orders.retry-1", Conn: conn}, nil
		case "broken":
			return deadletters.Target{}, errors.New("API server unreachable")
		}
		return deadletters.Target{}, fmt.Errorf("%w: no pipeline %s/%s", deadletters.ErrNoTarget, ns, name)
	}
	entry := func(pipeline string) *deadletters.Entry { return &deadletters.Entry{Pipeline: pipeline} }
	def := deadletters.Targets(nil, "shop", conn, tier)
	for range 3 {
		if got, err := def(ctx, entry("shop/orders")); err != nil || got.Topic != "shop.orders.retry-1" || got.Pipeline != "shop/orders" {
			t.Fatalf("own pipeline: %v %v", got, err)
		}
	}
	if lookups["shop/orders"] != 1 {
		t.Errorf("looked up %d times, want once", lookups["shop/orders"])
	}
	for _, p := range []string{"bank/payments", "", "orders", "shop/", "shop/missing", "shop/a/b"} {
		if _, err := def(ctx, entry(p)); !errors.Is(err, deadletters.ErrNoTarget) {
			t.Errorf("pipeline %q: %v, want ErrNoTarget", p, err)
		}
	}
	if lookups["bank/payments"] != 0 {
		t.Error("a pipeline of another namespace was looked up")
	}
	if _, err := def(ctx, entry("shop/broken")); err == nil || errors.Is(err, deadletters.ErrNoTarget) {
		t.Errorf("a failing lookup: %v, want an error that stops the run", err)
	}
	named := deadletters.Targets(&retryv1alpha1.ReplayTarget{Pipeline: "orders"}, "shop", conn, tier)
	if got, err := named(ctx, entry("bank/payments")); err != nil || got.Topic != "shop.orders.retry-1" || got.Pipeline != "shop/orders" {
		t.Errorf("named pipeline: %v %v", got, err)
	}
	topic := deadletters.Targets(&retryv1alpha1.ReplayTarget{Topic: "orders.replay"}, "shop", conn, tier)
	if got, err := topic(ctx, entry("")); err != nil || got.Topic != "orders.replay" || got.Conn.Key() != conn.Key() || got.Pipeline != "" {
		t.Errorf("named topic: %v %v", got, err)
	}
}

// The in-memory fake is a whole ClientFactory: Run works on it (the controllers' unit tests use it),
// and hostile dead letters are skipped as malformed, never replayed, never a panic.
func TestRunOnTheFakeSkipsMalformedDeadLetters(t *testing.T) {
	ctx := context.Background()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	f := kafkafake.New()
	state, _ := deadletters.StateTopic(dlqTopic)
	for _, tp := range []string{dlqTopic, state, tierTopic} {
		f.AddTopic(tp, 1, 1, nil)
	}
	good := []kafka.Header{
		{Key: headers.Pipeline, Value: []byte(ordersPipe)},
		{Key: headers.OriginalTopic, Value: []byte("orders")}, {Key: headers.OriginalPartition, Value: []byte("0")},
		{Key: headers.OriginalOffset, Value: []byte("9")}, {Key: headers.OriginalTimestamp, Value: []byte("2030-01-01T00:00:00Z")},
	}
	recs := []kafka.ProduceRecord{
		{Key: []byte("ok"), Headers: good},
		{Key: []byte("no-original"), Headers: good[:1]},
		{Key: []byte("bad-count"), Headers: append(append([]kafka.Header{}, good...), kafka.Header{Key: headers.ReplayCount, Value: []byte("01")})},
		{Key: []byte("bad-offset"), Headers: append(append([]kafka.Header{}, good[:3]...), kafka.Header{Key: headers.OriginalOffset, Value: []byte("-9")}, good[4])},
		{Key: []byte("no-value"), Headers: append(append([]kafka.Header{}, good...), kafka.Header{Key: headers.ValueOmitted, Value: []byte("2000000")})},
		{Key: []byte("garbage"), Headers: []kafka.Header{{Key: headers.Pipeline, Value: []byte{0xff, '/', 0xfe}}, {Key: headers.ReplayOf, Value: []byte("x")}}},
	}
	if _, err := f.ProduceRecords(ctx, conn, dlqTopic, recs); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, conn: conn}
	spec := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "jane"}
	prog, err := deadletters.Run(ctx, deadletters.Options{
		Spec: spec, Ref: ref, Topic: dlqTopic, Conn: conn, Kafka: f, Snapshot: map[int32]int64{0: int64(len(recs))}, Target: e.toOrdersTier, Holders: testLedger,
	})
	if err != nil {
		t.Fatal(err)
	}
	if prog.Matched != 6 || prog.Done != 1 || prog.SkippedBy[deadletters.SkipMalformed] != 3 || prog.SkippedBy[deadletters.SkipIncomplete] != 1 || prog.SkippedBy[deadletters.SkipNoTarget] != 1 {
		t.Errorf("progress %+v, want 1 replayed, 3 malformed, 1 incomplete, 1 without target", prog)
	}
	out := f.Records(tierTopic, 0)
	if len(out) != 1 || string(out[0].Key) != "ok" {
		t.Fatalf("replayed %+v", out)
	}
	if st := f.Records(state, 0); len(st) != 1 || string(st[0].Key) != "0/0" {
		t.Errorf("states %+v", st)
	}
}

func TestCountsAndOldestPending(t *testing.T) {
	ctx := context.Background()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	f := kafkafake.New()
	f.AddTopic(dlqTopic, 2, 1, nil)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []kafka.ProduceRecord
	for i := range 10 {
		recs = append(recs, kafka.ProduceRecord{Partition: int32(i % 2), Timestamp: base.Add(time.Duration(i) * time.Minute)})
	}
	if _, err := f.ProduceRecords(ctx, conn, dlqTopic, recs); err != nil {
		t.Fatal(err)
	}
	// Partition 0 holds minutes 0, 2, 4, 6, 8 at offsets 0..4; partition 1 minutes 1, 3, 5, 7, 9.
	st := &deadletters.States{}
	st.Set(deadletters.ID{Partition: 0, Offset: 0}, deadletters.State{State: retryv1alpha1.DeadLetterResolved})
	st.Set(deadletters.ID{Partition: 0, Offset: 1}, deadletters.State{State: retryv1alpha1.DeadLetterIgnored})
	st.Set(deadletters.ID{Partition: 1, Offset: 0}, deadletters.State{State: retryv1alpha1.DeadLetterReplayed})
	st.Set(deadletters.ID{Partition: 1, Offset: 1}, deadletters.State{State: retryv1alpha1.DeadLetterReplayed})
	st.Set(deadletters.ID{Partition: 1, Offset: 2}, deadletters.State{State: retryv1alpha1.DeadLetterResolved})
	st.Set(deadletters.ID{Partition: 1, Offset: 9}, deadletters.State{State: retryv1alpha1.DeadLetterResolved}) // beyond the end: not counted
	offs, _ := f.ListOffsets(ctx, dlqTopic)
	counts := st.Counts(offs[dlqTopic])
	want := map[retryv1alpha1.DeadLetterState]int64{retryv1alpha1.DeadLetterPending: 5, retryv1alpha1.DeadLetterReplayed: 2, retryv1alpha1.DeadLetterResolved: 2, retryv1alpha1.DeadLetterIgnored: 1}
	if !maps.Equal(counts, want) {
		t.Errorf("counts %v, want %v", counts, want)
	}
	oldest, err := deadletters.OldestPending(ctx, f, conn, dlqTopic, offs[dlqTopic], st)
	if err != nil || !oldest.Equal(base.Add(4*time.Minute)) {
		t.Errorf("oldest pending %v %v, want minute 4 (partition 0 offset 2)", oldest, err)
	}
}

func TestCheckTopicTarget(t *testing.T) {
	for topic, refused := range map[string]bool{
		"orders":               false,
		"team-a.orders":        false,
		"team-a.dlq.state":     true,  // any queue's record of decisions
		"state":                false, // no ".state" suffix
		"orders.retry.1":       true,  // ByAttempt tier
		"orders.retry.12":      true,
		"orders.retry.1m30s":   true, // ByDelay tier
		"orders.retry.1.5s":    true,
		"orders.retry.4s-3":    true,
		"orders.retry.500ms":   true,
		"orders.retry":         false,
		"orders.retry.archive": false,
		"orders.retrying.1":    false,
	} {
		err := deadletters.CheckTopicTarget(topic)
		if (err != nil) != refused {
			t.Errorf("CheckTopicTarget(%q) = %v, want refused %v", topic, err, refused)
		}
	}
}

// A replay names the pipeline it is replayed into (retryops.pipeline, once), which that pipeline's
// dispatcher requires of a tier record: the dead letter's own for its own pipeline, the target's
// for another (spec.target.pipeline), the dead letter's kept for a topic the action names.
func TestReplayNamesItsTargetPipeline(t *testing.T) {
	ctx := context.Background()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	// The tier of each target pipeline, or a source topic for a topic the action names.
	into := map[string]string{ordersPipe: tierTopic, "shop/audit": "audit.retry.1", "": "orders"}
	for target, want := range map[string]string{ordersPipe: ordersPipe, "shop/audit": "shop/audit", "": ordersPipe} {
		f := kafkafake.New()
		state, _ := deadletters.StateTopic(dlqTopic)
		tierTopic := into[target]
		for _, tp := range []string{dlqTopic, state, tierTopic} {
			f.AddTopic(tp, 1, 1, nil)
		}
		dl := kafka.ProduceRecord{Key: []byte("k"), Headers: []kafka.Header{
			{Key: headers.Pipeline, Value: []byte(ordersPipe)},
			{Key: headers.OriginalTopic, Value: []byte("orders")}, {Key: headers.OriginalPartition, Value: []byte("0")},
			{Key: headers.OriginalOffset, Value: []byte("9")}, {Key: headers.OriginalTimestamp, Value: []byte("2030-01-01T00:00:00Z")},
		}}
		if _, err := f.ProduceRecords(ctx, conn, dlqTopic, []kafka.ProduceRecord{dl}); err != nil {
			t.Fatal(err)
		}
		to := func(context.Context, *deadletters.Entry) (deadletters.Target, error) {
			return deadletters.Target{Topic: tierTopic, Conn: conn, Pipeline: target}, nil
		}
		spec := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "jane"}
		if _, err := deadletters.Run(ctx, deadletters.Options{
			Spec: spec, Ref: ref, Topic: dlqTopic, Conn: conn, Kafka: f, Snapshot: map[int32]int64{0: 1}, Target: to, Holders: testLedger,
		}); err != nil {
			t.Fatal(err)
		}
		out := f.Records(tierTopic, 0)
		if len(out) != 1 {
			t.Fatalf("target %q: %d replays, want 1", target, len(out))
		}
		var got []string
		for _, h := range out[0].Headers {
			if h.Key == headers.Pipeline {
				got = append(got, string(h.Value))
			}
		}
		if len(got) != 1 || got[0] != want {
			t.Errorf("target %q: the replay names pipelines %q, want %q", target, got, want)
		}
	}
}
