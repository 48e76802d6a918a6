package dlqui

import (
	"sync"
	"time"

	"k8s.io/utils/clock"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// maxSamples bounds the samples kept per queue (the sparkline's points).
const maxSamples = 60

// minSampleGap keeps queues without a refresh time from adding a sample per page load.
const minSampleGap = 5 * time.Second

// sample is a queue's counts at one status refresh.
type sample struct {
	at       time.Time
	messages int64
	pending  int64
}

// samples are the queue counts the console saw while it ran: the DeadLetterQueue status holds only
// the current figures, so the growth sparkline is drawn from the refreshes seen since the console
// started (one per status refresh, at most maxSamples).
type samples struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byKey map[string][]sample
}

func newSamples(c clock.PassiveClock) *samples {
	return &samples{clock: c, byKey: map[string][]sample{}}
}

// record adds q's current counts when its status was refreshed since the last sample, and returns
// the queue's samples, oldest first.
func (s *samples) record(q *retryv1alpha1.DeadLetterQueue) []sample {
	at := s.clock.Now()
	if t := q.Status.LastRefreshTime; t != nil {
		at = t.Time
	}
	cur := sample{at: at}
	if q.Status.Messages != nil {
		cur.messages = *q.Status.Messages
	}
	if q.Status.Pending != nil {
		cur.pending = *q.Status.Pending
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := q.Namespace + "/" + q.Name
	list := s.byKey[key]
	if n := len(list); n == 0 || at.Sub(list[n-1].at) >= minSampleGap ||
		(q.Status.LastRefreshTime != nil && at.After(list[n-1].at)) {
		list = append(list, cur)
		if len(list) > maxSamples {
			list = list[len(list)-maxSamples:]
		}
		s.byKey[key] = list
	}
	return append([]sample(nil), list...)
}
