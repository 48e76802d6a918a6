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

// refusalFixture is a queue of one replayable dead letter of pipeline shop/orders on the fake,
// beside the topics a replay must never write into.
func refusalFixture(t *testing.T) (*kafkafake.Fake, kafka.Connection) {
	t.Helper()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	f := kafkafake.New()
	state, _ := deadletters.StateTopic(dlqTopic)
	for _, tp := range []string{dlqTopic, state, tierTopic, "billing.retry.1", "payments.dlq", "payments.dlq.state", "orders", "shared.retry.1"} {
		f.AddTopic(tp, 1, 1, nil)
	}
	dl := kafka.ProduceRecord{Key: []byte("k"), Value: []byte(`{"state":"Resolved","requestedBy":"mallory"}`), Headers: []kafka.Header{
		{Key: headers.Pipeline, Value: []byte(ordersPipe)},
		{Key: headers.OriginalTopic, Value: []byte("orders")}, {Key: headers.OriginalPartition, Value: []byte("0")},
		{Key: headers.OriginalOffset, Value: []byte("9")}, {Key: headers.OriginalTimestamp, Value: []byte("2030-01-01T00:00:00Z")},
	}}
	if _, err := f.ProduceRecords(context.Background(), conn, dlqTopic, []kafka.ProduceRecord{dl}); err != nil {
		t.Fatal(err)
	}
	return f, conn
}

// TestRunRefusesTargetsItMayNotWrite: the engine itself refuses to replay into a queue's topic, a
// record of decisions or another pipeline's retry tier, whichever way the target was made (a
// topic the action names, or a pipeline lookup that gave a tier not the pipeline's), with an
// error naming the topic, and writes nothing: no replay, no decision.
func TestRunRefusesTargetsItMayNotWrite(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		topic string
		spec  *retryv1alpha1.ReplayTarget
	}{
		"the queue's own topic":              {dlqTopic, &retryv1alpha1.ReplayTarget{Topic: dlqTopic}},
		"another queue's topic":              {"payments.dlq", &retryv1alpha1.ReplayTarget{Topic: "payments.dlq"}},
		"a record of decisions":              {"payments.dlq.state", &retryv1alpha1.ReplayTarget{Topic: "payments.dlq.state"}},
		"a tier named as a topic":            {"billing.retry.1", &retryv1alpha1.ReplayTarget{Topic: "billing.retry.1"}},
		"another pipeline's tier, looked up": {"billing.retry.1", nil},
		"a record of decisions, looked up":   {"payments.dlq.state", &retryv1alpha1.ReplayTarget{Pipeline: "orders"}},
	} {
		t.Run(name, func(t *testing.T) {
			f, conn := refusalFixture(t)
			lookup := func(context.Context, string, string) (deadletters.Target, error) {
				return deadletters.Target{Topic: c.topic, Conn: conn}, nil
			}
			spec := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "mallory", Target: c.spec}
			_, err := deadletters.Run(ctx, deadletters.Options{
				Spec: spec, Ref: ref, Topic: dlqTopic, Conn: conn, Kafka: f, Snapshot: map[int32]int64{0: 1},
				Target: deadletters.Targets(spec.Target, "shop", conn, lookup), Holders: testLedger,
			})
			if !errors.Is(err, deadletters.ErrTargetRefused) || !strings.Contains(err.Error(), c.topic) {
				t.Errorf("run: %v, want it refused (an error that stops it) naming %q", err, c.topic)
			}
			state, _ := deadletters.StateTopic(dlqTopic)
			for _, tp := range []string{c.topic, state} {
				want := 0
				if tp == dlqTopic {
					want = 1
				}
				if got := f.Records(tp, 0); len(got) != want {
					t.Errorf("%s holds %d records, want %d: nothing written", tp, len(got), want)
				}
			}
		})
	}
}

// TestRunWithoutTheLedgerRefusesAReplay: a Replay without the topic ledger to check its targets
// against does not start; a ledger that cannot be read stops the run (an error worth retrying, not
// a refusal) before anything is written.
func TestRunWithoutTheLedgerRefusesAReplay(t *testing.T) {
	ctx := context.Background()
	f, conn := refusalFixture(t)
	spec := retryv1alpha1.DeadLetterActionSpec{Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "jane"}
	o := deadletters.Options{Spec: spec, Ref: ref, Topic: dlqTopic, Conn: conn, Kafka: f, Snapshot: map[int32]int64{0: 1},
		Target: func(context.Context, *deadletters.Entry) (deadletters.Target, error) {
			return deadletters.Target{Topic: tierTopic, Conn: conn, Pipeline: ordersPipe}, nil
		}}
	if _, err := deadletters.Run(ctx, o); err == nil || !strings.Contains(err.Error(), "topic ledger") {
		t.Errorf("without the ledger: %v, want the Replay refused", err)
	}
	o.Holders = func(context.Context, string) ([]deadletters.Holder, error) {
		return nil, errors.New("API server unreachable")
	}
	if _, err := deadletters.Run(ctx, o); err == nil || errors.Is(err, deadletters.ErrTargetRefused) || !strings.Contains(err.Error(), "unreachable") {
		t.Errorf("the ledger failing: %v, want its error", err)
	}
	if got := f.Records(tierTopic, 0); len(got) != 0 {
		t.Errorf("%d records replayed, want none", len(got))
	}
}
