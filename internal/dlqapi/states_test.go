package dlqapi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

// stateReads counts the records of the record of decisions the API scans.
type stateReads struct {
	dlqapi.Kafka
	state string
	mu    sync.Mutex
	n     int
}

func (s *stateReads) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	return s.Kafka.Scan(ctx, conn, ranges, func(r kafka.Record) {
		if r.Topic == s.state {
			s.mu.Lock()
			s.n++
			s.mu.Unlock()
		}
		fn(r)
	})
}

func (s *stateReads) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.n
	s.n = 0
	return n
}

// TestPagesReadOnlyNewDecisions: a list page reads the record of decisions only from where the
// last page stopped, decisions on records that are gone are not shown or kept, and a topic deleted
// and created again shows none of the old decisions.
func TestPagesReadOnlyNewDecisions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kf := newKafka(t, "pages.dlq", 1, 30, 16)
	state, _ := deadletters.StateTopic(kf.topic)
	reads := &stateReads{Kafka: kf.f, state: state}
	s := &dlqapi.Storage{Queues: dlqapi.StaticQueues{"shop": {{Name: "pages", Topic: kf.topic, Conn: kf.conn}}}, Kafka: reads}
	nsCtx := genericapirequest.WithNamespace(ctx, "shop")
	admin, err := kf.f.Admin(ctx, kf.conn)
	if err != nil {
		t.Fatal(err)
	}
	decide := func(offsets ...int64) {
		t.Helper()
		id, err := deadletters.TopicID(ctx, admin, kf.topic)
		if err != nil {
			t.Fatal(err)
		}
		var ups []deadletters.StateUpdate
		for _, o := range offsets {
			ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Offset: o}, State: deadletters.State{State: retryv1alpha1.DeadLetterResolved, RequestedBy: "alice", Time: kf.t0, TopicID: id}})
		}
		if _, err := deadletters.WriteStates(ctx, kf.f, kf.conn, kf.topic, ups); err != nil {
			t.Fatal(err)
		}
	}
	// page lists the first n dead letters: their states in order.
	page := func(n int64) []dlv1.State {
		t.Helper()
		obj, err := s.List(nsCtx, &metainternalversion.ListOptions{Limit: n})
		if err != nil {
			t.Fatal(err)
		}
		var out []dlv1.State
		for _, d := range obj.(*dlv1.DeadLetterList).Items {
			out = append(out, d.State.State)
		}
		return out
	}
	P, R := dlv1.StatePending, dlv1.StateResolved

	decide(0, 1, 2, 3)
	if got := page(4); !equal(got, R, R, R, R) || reads.take() != 4 {
		t.Fatalf("first page %v", got)
	}
	if got, n := page(4), reads.take(); !equal(got, R, R, R, R) || n != 0 {
		t.Fatalf("the same page again: %v, %d decisions read; want 0 read", got, n)
	}
	decide(5)
	if got, n := page(6), reads.take(); !equal(got, R, R, R, R, P, R) || n != 1 {
		t.Fatalf("after one more decision: %v, %d decisions read; want the 1 new one read", got, n)
	}
	// Retention deletes the first two.
	if err := admin.DeleteRecordsBefore(ctx, kf.topic, map[int32]int64{0: 2}); err != nil {
		t.Fatal(err)
	}
	if got, n := page(4), reads.take(); !equal(got, R, R, P, R) || n != 0 {
		t.Fatalf("after trimming: %v, %d decisions read", got, n)
	}
	// Deleted and created again under its name: the new dead letters at offsets 0 to 29 are Pending.
	if err := admin.DeleteTopic(ctx, kf.topic); err != nil {
		t.Fatal(err)
	}
	if err := admin.CreateTopic(ctx, kf.topic, 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	recs := make([]kafka.ProduceRecord, 10)
	for i := range recs {
		recs[i] = kf.record(i, 0, 16)
	}
	// A new client: the factory's producer knows the old topic's ID.
	fresh := franz.NewFactory()
	defer fresh.Close()
	if _, err := fresh.ProduceRecords(ctx, kf.conn, kf.topic, recs); err != nil {
		t.Fatal(err)
	}
	if got := page(6); !equal(got, P, P, P, P, P, P) {
		t.Fatalf("after the topic was created again: %v", got)
	}
}

func equal(got []dlv1.State, want ...dlv1.State) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
