package dispatcher_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/retryops/retry-operator/internal/dispatcher"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
)

// TestDrainingTiers: after a policy change lowered maxAttempts from 4 to 2, the tier of the old
// third delivery still holds records. Listed in topics.draining, it is consumed: a record waiting
// for its second delivery is delivered at its due time, and one that already had three deliveries,
// more than the policy now allows, is dead-lettered as max_retries_exceeded without being delivered
// (not as malformed, and not left in the topic for ever) (issue 13, defect 7).
func TestDrainingTiers(t *testing.T) {
	p := newPipeline(t, "draining", 1, simplePolicy(2, 50*time.Millisecond), nil)
	old := p.cfg.Topics.Source + ".retry.3"
	if _, err := kadm.NewClient(p.prod).CreateTopic(context.Background(), 1, 1, nil, old); err != nil {
		t.Fatal(err)
	}
	p.cfg.Topics.Draining = []string{old}
	waiting := tierRecord(p, "waiting", "7", "1", time.Now().Add(300*time.Millisecond))
	spent := tierRecord(p, "spent", "8", "3", time.Now().Add(100*time.Millisecond))
	waiting.Topic, spent.Topic = old, old
	dt.Produce(t, p.prod, spent, waiting)
	start(t, dispatcher.Options{Config: p.cfg})

	p.sink.WaitFor(t, 20*time.Second, func(reqs []*dt.Request) bool { return len(reqs) >= 1 }, "the waiting record delivered")
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dl))
	}
	reason, _ := dt.Header(dl[0], headers.Reason)
	attempts, _ := dt.Header(dl[0], headers.Attempts)
	if string(dl[0].Key) != "spent" || reason != headers.ReasonMaxRetriesExceeded || attempts != "3" {
		t.Errorf("dead letter %q: reason %s, attempts %s; want spent, %s, 3", dl[0].Key, reason, attempts, headers.ReasonMaxRetriesExceeded)
	}
	reqs := p.sink.Requests()
	if len(reqs) != 1 || string(reqs[0].Body) != "waiting" || reqs[0].Attempt != 2 {
		t.Fatalf("deliveries: %d (%v), want only the waiting record's second attempt", len(reqs), dt.Keys(reqs))
	}
	dt.Eventually(t, 10*time.Second, func() bool { return p.committed(t, old, 0) == 2 }, "the draining tier committed to its end")
}
