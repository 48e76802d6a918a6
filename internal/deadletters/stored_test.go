package deadletters_test

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/sdk/testutil/golden"
)

// TestRecordOfDecisionsFormat pins the record of decisions as this release writes it to
// <topic>.state: the keys (<partition>/<offset>, the read-from record's key), the JSON of a
// decision and of a read-from record, and a tombstone's nil value; and reads the golden file back
// as the decisions written. A change here changes what earlier releases left in Kafka: see
// docs/development.md, "Stored formats and compatibility", before running -update.
func TestRecordOfDecisionsFormat(t *testing.T) {
	ctx := ctxT(t)
	fake := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}, ClientID: "test"}
	state, _ := deadletters.StateTopic("shop.orders.dlq")
	fake.AddTopic("shop.orders.dlq", 3, 1, nil)
	fake.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	at := time.Date(2026, 12, 2, 9, 30, 0, 123456789, time.UTC)
	action := deadletters.ActionRef{Namespace: "shop", Name: "replay-1", UID: "7d3c2a1e-0000-4000-8000-000000000001"}
	decisions := []deadletters.StateUpdate{
		{ID: deadletters.ID{Partition: 0, Offset: 7}, State: deadletters.State{State: retryv1alpha1.DeadLetterReplayed, RequestedBy: "jane@example.com",
			Action: action, Time: at, ReplayCount: 2, TopicID: "0b6e1d2c-8f3a-4e5b-9c7d-112233445566"}},
		{ID: deadletters.ID{Partition: 2, Offset: 41}, State: deadletters.State{State: retryv1alpha1.DeadLetterResolved, Note: "fixed upstream",
			RequestedBy: "jane@example.com", Action: action, Time: at}},
		{ID: deadletters.ID{Partition: 1, Offset: 3}, State: deadletters.State{State: retryv1alpha1.DeadLetterIgnored, Action: action, Time: at}},
		{ID: deadletters.ID{Partition: 1, Offset: 4}}, // a tombstone
		{ReadFrom: &deadletters.ReadFrom{Offset: 1200, Also: []int64{3, 17}, TopicID: "0b6e1d2c-8f3a-4e5b-9c7d-112233445566"}},
	}
	if _, err := deadletters.WriteStates(ctx, fake, conn, "shop.orders.dlq", decisions); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, r := range fake.Records(state, 0) {
		v := "nil"
		if r.Value != nil {
			v = strconv.Quote(string(r.Value))
		}
		b.WriteString("key: " + strconv.Quote(string(r.Key)) + "\nvalue: " + v + "\n")
	}
	golden.Assert(t, "record-of-decisions.golden", b.Bytes(),
		"go test ./internal/deadletters -run TestRecordOfDecisionsFormat (a stored format: read docs/development.md#stored-formats-and-compatibility first)")

	// The records, those of the golden file once it matched, read back as the decisions written.
	got := map[deadletters.ID]deadletters.State{}
	if _, err := deadletters.ScanStates(ctx, fake, fake, conn, "shop.orders.dlq", nil, func(id deadletters.ID, st deadletters.State, err error) {
		if err != nil {
			t.Errorf("%s: %v", id, err)
		}
		got[id] = st
	}); err != nil {
		t.Fatal(err)
	}
	for _, d := range decisions[:4] {
		want := d.State
		if want.Pending() {
			want = deadletters.State{State: retryv1alpha1.DeadLetterPending}
		}
		if got[d.ID] != want {
			t.Errorf("%s read back as %+v, want %+v", d.ID, got[d.ID], want)
		}
	}
}
