package deadletters_test

import (
	"slices"
	"testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// TestSurveyTombstonesDecisionsBeyondTheEnd: a decision on an offset the topic never held (at or
// beyond a partition's end, or on a partition the topic does not have) is on no dead letter: it is
// not counted, not among the states held, and the survey tombstones it, so that it never applies
// to the record the topic writes at that offset later.
func TestSurveyTombstonesDecisionsBeyondTheEnd(t *testing.T) {
	ctx := ctxT(t)
	fake := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}, ClientID: "test"}
	state, _ := deadletters.StateTopic(dlqTopic)
	fake.AddTopic(dlqTopic, 2, 1, nil)
	fake.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	fake.SetOffsets(dlqTopic, 0, 0, 10)
	fake.SetOffsets(dlqTopic, 1, 0, 10)
	id := fake.Topic(dlqTopic).ID
	resolved := deadletters.State{State: retryv1alpha1.DeadLetterResolved, RequestedBy: "mallory", Time: seedBase, TopicID: id}
	held := deadletters.ID{Partition: 0, Offset: 3}
	beyond := []deadletters.ID{{Partition: 0, Offset: 10}, {Partition: 1, Offset: 1 << 40}, {Partition: 7, Offset: 0}}
	var ups []deadletters.StateUpdate
	for _, d := range append([]deadletters.ID{held}, beyond...) {
		ups = append(ups, deadletters.StateUpdate{ID: d, State: resolved})
	}
	if _, err := deadletters.WriteStates(ctx, fake, conn, dlqTopic, ups); err != nil {
		t.Fatal(err)
	}
	offs := fake.Offsets(dlqTopic)
	states, got, err := deadletters.Survey(ctx, fake, fake, conn, dlqTopic, id, offs, 10)
	if err != nil {
		t.Fatal(err)
	}
	var tombstoned []deadletters.ID
	for _, u := range got {
		if u.State.Pending() {
			tombstoned = append(tombstoned, u.ID)
		}
	}
	slices.SortFunc(tombstoned, func(a, b deadletters.ID) int {
		return int(a.Partition-b.Partition)*1000 + int(min(a.Offset, 999)-min(b.Offset, 999))
	})
	if !slices.Equal(tombstoned, beyond) {
		t.Errorf("survey tombstones %v, want the decisions beyond the end %v", tombstoned, beyond)
	}
	if _, ok := states.ByID[held]; !ok || len(states.ByID) != 1 {
		t.Errorf("states held %v, want only %v", states.ByID, held)
	}
	if c := states.Counts(offs); c[retryv1alpha1.DeadLetterResolved] != 1 || c[retryv1alpha1.DeadLetterPending] != 19 {
		t.Errorf("counts %v, want 1 resolved and 19 pending", c)
	}
}
