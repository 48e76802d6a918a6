package dispatcher_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestDrainingTiers: after a policy change lowered maxAttempts from 4 to 2, the tier of the old
// third delivery still holds records. Listed in topics.draining, it is consumed: a record waiting
// for its second delivery is delivered at its due time, and one that already had three deliveries,
// more than the policy now allows, is dead-lettered as max_retries_exceeded without being delivered
// (not as malformed, and not left in the topic for ever).
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

// countingHandler is a slog handler that counts records by message.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.counts[r.Message]++
	h.mu.Unlock()
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }
func (h *countingHandler) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

// TestFetchErrorsAreBoundedAndDeletedDrainingTiersDropped: franz-go reports a fetch error on every
// poll while it lasts (the e2e policy-change run logged 38,000 lines a pod for a deleted tier). A
// partition's error is logged once per 30 s on the engine's clock; an "unknown topic" error of a
// draining tier (the operator deleted it once drained) drops that tier from consumption, saying so
// once.
func TestFetchErrorsAreBoundedAndDeletedDrainingTiersDropped(t *testing.T) {
	p := newPipeline(t, "fetch-errors", 1, simplePolicy(2, 50*time.Millisecond), nil)
	old := p.cfg.Topics.Source + ".retry.old"
	p.cfg.Topics.Draining = []string{old}
	logs := &countingHandler{counts: map[string]int{}}
	fc := clocktesting.NewFakeClock(time.Now())
	e, err := dispatcher.New(dispatcher.Options{Config: p.cfg, Logger: slog.New(logs), Clock: fc,
		Handler: dispatcher.HandlerFunc(func(context.Context, *dispatcher.Delivery) dispatcher.Result { return dispatcher.Result{Success: true} })})
	if err != nil {
		t.Fatal(err)
	}
	src := p.cfg.Topics.Source
	for range 100 {
		e.FetchError(src, 0, kerr.NotLeaderForPartition)
	}
	if n := logs.count("Fetch error"); n != 1 {
		t.Fatalf("%d fetch errors logged for 100 polls within 30s, want 1", n)
	}
	fc.Step(31 * time.Second)
	e.FetchError(src, 0, kerr.NotLeaderForPartition)
	e.FetchError(src, 1, kerr.NotLeaderForPartition)
	if n := logs.count("Fetch error"); n != 3 {
		t.Fatalf("%d fetch errors logged, want 3 (once more after 30s, and another partition's)", n)
	}
	for range 10 {
		e.FetchError(old, 0, kerr.UnknownTopicID)
	}
	if n := logs.count("A draining retry tier no longer exists; no longer consuming it"); n != 1 {
		t.Fatalf("the deleted draining tier reported %d times, want once", n)
	}
	e.FetchError(src, 2, kerr.UnknownTopicID) // the source is never dropped
	if n := logs.count("Fetch error"); n != 4 {
		t.Fatalf("%d fetch errors logged, want 4: an unknown source topic is logged, not dropped", n)
	}
}
