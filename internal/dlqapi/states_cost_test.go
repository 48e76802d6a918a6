package dlqapi

import (
	"context"
	"fmt"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// staleQueue is a kafkafake queue of 100 dead letters held (offsets [gone, gone+100) of one
// partition) behind gone dead letters that retention deleted after each was resolved, and the
// decision on the first one held.
func staleQueue(t *testing.T, gone int) (*kafkafake.Fake, kafka.Connection, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	topic := "stale.dlq"
	state, _ := deadletters.StateTopic(topic)
	f.AddTopic(topic, 1, 1, nil)
	f.AddTopic(state, 1, 1, deadletters.StateTopicConfigs())
	f.SetOffsets(topic, 0, int64(gone), int64(gone))
	var recs []kafka.ProduceRecord
	for i := range 100 {
		recs = append(recs, kafka.ProduceRecord{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v"), Partition: 0})
	}
	if _, err := f.ProduceRecords(ctx, conn, topic, recs); err != nil {
		t.Fatal(err)
	}
	id := f.Topic(topic).ID
	resolved := deadletters.State{State: retryv1alpha1.DeadLetterResolved, RequestedBy: "alice", TopicID: id,
		Action: deadletters.ActionRef{Namespace: "shop", Name: "resolve", UID: "u"}, Time: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	for start := 0; start < gone; start += 5000 {
		var ups []deadletters.StateUpdate
		for o := start; o < min(gone, start+5000); o++ {
			ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Offset: int64(o)}, State: resolved})
		}
		if _, err := deadletters.WriteStates(ctx, f, conn, topic, ups); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := deadletters.WriteStates(ctx, f, conn, topic, []deadletters.StateUpdate{{ID: deadletters.ID{Offset: int64(gone)}, State: resolved}}); err != nil {
		t.Fatal(err)
	}
	return f, conn, topic, id
}

// surveyUntilTidy does what the queue's reconciler does until it finds nothing more to write:
// survey the record of decisions and write what the survey returns.
func surveyUntilTidy(t *testing.T, f *kafkafake.Fake, conn kafka.Connection, topic, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 100 {
		_, ups, err := deadletters.Survey(ctx, f, f, conn, topic, id, f.Offsets(topic), deadletters.MaxTidyUpdates)
		if err != nil {
			t.Fatal(err)
		}
		if len(ups) == 0 {
			return
		}
		if _, err := deadletters.WriteStates(ctx, f, conn, topic, ups); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the survey still finds what to tidy after 100 rounds")
}

// TestFirstPageOverStaleDecisionsFollowsThePage: a replica's first page of a queue whose record of
// decisions holds 20,000 decisions on dead letters that are gone (and that the reconciler tidied)
// reads a number of decisions that follows the page, not the history; and it still shows the
// decision on the page's dead letter.
func TestFirstPageOverStaleDecisionsFollowsThePage(t *testing.T) {
	const gone, maxRead = 20000, 1000
	f, conn, topic, id := staleQueue(t, gone)
	surveyUntilTidy(t, f, conn, topic, id)
	state, _ := deadletters.StateTopic(topic)
	kf := &countingKafka{Kafka: f, topic: state}
	s := &Storage{Kafka: kf, Queues: StaticQueues{"shop": {{Name: "stale", Topic: topic, Conn: conn}}}}
	ctx := genericapirequest.WithNamespace(context.Background(), "shop")
	obj, err := s.List(ctx, &metainternalversion.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := obj.(*dlv1.DeadLetterList)
	if len(l.Items) != 1 || l.Items[0].State.State != dlv1.StateResolved {
		t.Fatalf("first page: %+v, want the one dead letter, Resolved", l.Items)
	}
	if n := kf.n.Load(); n > maxRead {
		t.Errorf("a replica's first page of 1 dead letter read %d records of decisions (%d decisions on dead letters gone, tidied), want at most %d", n, gone, maxRead)
	}
}

// TestDecisionsBeyondTheEndAreNotKept: decisions on offsets the queue's topic does not hold, above
// its end as below its start, are not kept (nor shown), so that many of them never make the cache
// give up on a queue.
func TestDecisionsBeyondTheEndAreNotKept(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, conn, topic, id := staleQueue(t, 10)
	var ups []deadletters.StateUpdate
	for o := range int64(50) {
		ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Offset: 110 + o*1000}, State: deadletters.State{State: retryv1alpha1.DeadLetterIgnored, RequestedBy: "mallory", TopicID: id, Time: time.Now()}})
	}
	ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Partition: 3, Offset: 11}, State: deadletters.State{State: retryv1alpha1.DeadLetterIgnored, RequestedBy: "mallory", TopicID: id, Time: time.Now()}})
	if _, err := deadletters.WriteStates(ctx, f, conn, topic, ups); err != nil {
		t.Fatal(err)
	}
	s := &Storage{Kafka: f}
	src, err := s.loadStates(ctx, f, Queue{Name: "stale", Topic: topic, Conn: conn})
	if err != nil {
		t.Fatal(err)
	}
	if src.all == nil || len(src.all.byID) != 1 {
		var kept []string
		if src.all != nil {
			for d := range src.all.byID {
				kept = append(kept, fmt.Sprint(d))
			}
		}
		t.Fatalf("the cache keeps %d decisions %v, want only the one on a record held (10/0)", len(kept), kept)
	}
}
