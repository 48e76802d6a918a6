package dlqapi

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// The cache of decisions is bounded as a whole, not only per queue: 64 queues of 16 MiB each would
// be 1 GiB in a manager limited to 256 MiB. Four queues of about 12 MiB of decisions each (1 KiB
// notes, a different one each) are read; the cache keeps at most maxCachedBytes of them.
func TestStateCacheIsBoundedAsAWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	s := &Storage{Kafka: f}
	const queues, decisions = 4, 8000
	note := strings.Repeat("n", deadletters.MaxNoteBytes)
	for i := range queues {
		topic := fmt.Sprintf("q%d.dlq", i)
		state, _ := deadletters.StateTopic(topic)
		f.AddTopic(topic, 1, 1, nil)
		f.AddTopic(state, 1, 1, nil)
		f.SetOffsets(topic, 0, 0, decisions)
		ids, err := f.TopicIDs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		var ups []deadletters.StateUpdate
		for o := range int64(decisions) {
			ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Partition: 0, Offset: o}, State: deadletters.State{
				State: retryv1alpha1.DeadLetterResolved, Note: fmt.Sprintf("%06d", o) + note[6:], RequestedBy: "jane@example.com", TopicID: ids[topic],
				Action: deadletters.ActionRef{Namespace: "shop", Name: "resolve", UID: "u"}, Time: time.Now()}})
		}
		if _, err := deadletters.WriteStates(ctx, f, conn, topic, ups); err != nil {
			t.Fatal(err)
		}
		src, err := s.loadStates(ctx, f, Queue{Name: fmt.Sprintf("q%d", i), Topic: topic, Conn: conn})
		if err != nil || src.all == nil || len(src.all.byID) != decisions {
			t.Fatalf("queue %d: %+v, %v", i, src, err)
		}
	}
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	total := 0
	for _, qs := range s.cache.queues {
		total += qs.bytes
	}
	if total > maxCachedBytes {
		t.Errorf("the cache keeps %d MiB of decisions of %d queues, more than %d MiB", total>>20, len(s.cache.queues), maxCachedBytes>>20)
	}
}
