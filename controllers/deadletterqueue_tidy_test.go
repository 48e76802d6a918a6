package controllers

import (
	"context"
	"testing"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// The tidying tombstones the decisions of another topic ID than the one the reconcile read. When
// the topic is deleted and created again out of band after that read, the decisions made on the new
// topic are "another topic ID": the tidying must check the topic ID again before it writes, as a
// Purge does, or it drops them and their dead letters become Pending again (to be replayed twice).
func TestTidyingChecksTheTopicIDBeforeItWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	const topic = "shop.tidy.dlq"
	state, _ := deadletters.StateTopic(topic)
	f.AddTopic(topic, 1, 1, nil)
	f.AddTopic(state, 1, 1, nil)
	read, _ := f.TopicIDs(ctx, topic) // what this reconcile read
	// Out of band, the topic is deleted and created again, a dead letter arrives and is resolved.
	if err := f.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTopic(ctx, topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	f.Produce(topic, 0, 1)
	now, _ := f.TopicIDs(ctx, topic)
	id := deadletters.ID{Partition: 0, Offset: 0}
	resolved := deadletters.State{State: retryv1alpha1.DeadLetterResolved, Action: deadletters.ActionRef{Namespace: "shop", Name: "a"}, Time: time.Now(), TopicID: now[topic]}
	if _, err := deadletters.WriteStates(ctx, f, conn, topic, []deadletters.StateUpdate{{ID: id, State: resolved}}); err != nil {
		t.Fatal(err)
	}

	info := kafka.TopicInfo{Name: topic, ID: read[topic]}
	k := &kafkaClient{conn: conn, admin: f}
	spec, topics := dlqSpec{want: kafka.TopicSpec{Name: topic}}, dlqTopics{topic: &info, stateTopic: state}
	offs, _ := f.ListOffsets(ctx, topic)
	_, tidy, err := deadletters.Survey(ctx, f, f, conn, topic, topics.topicID(), offs[topic], deadletters.MaxTidyUpdates)
	if err != nil {
		t.Fatal(err)
	}
	r := &DeadLetterQueueReconciler{topicReconciler: topicReconciler{Kafka: &kafkaAccess{Producer: f, Scanner: f}}}
	r.tidyStates(ctx, &retryv1alpha1.DeadLetterQueue{}, spec, topics, k, tidy)

	states, err := deadletters.LoadStates(ctx, f, f, conn, topic, now[topic], nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := states.Get(id); got.State != retryv1alpha1.DeadLetterResolved {
		t.Errorf("after tidying with the topic ID read before the recreation (%d updates), the decision on %s made on the new topic is %+v, want Resolved", len(tidy), id, got)
	}
}
