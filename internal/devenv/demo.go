package devenv

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/utils/clock"
)

// DemoSink is an HTTP sink that fails on command, for the demo and the end-to-end test. Records are
// keyed "demo-<n>": Permanent(n) records are refused with 422 every time; the first Transient(n)
// deliveries of a record fail with 503, later ones succeed; everything else succeeds at once.
type DemoSink struct {
	// Permanent tells which records always fail (422).
	Permanent func(n int) bool
	// Transient tells how many deliveries of a record fail (503) before one succeeds.
	Transient func(n int) int
	// Clock stamps each delivery and, when it can wait (a clock.Clock), times Cost. Defaults to the
	// real clock.
	Clock clock.PassiveClock
	// Cost is how long the sink takes to answer each delivery: a sink whose work takes time, so that
	// a burst of records lasts long enough for an autoscaler to act on it.
	Cost time.Duration

	mu       sync.Mutex
	down     bool
	attempts map[string][]time.Time
	ok       map[string]time.Time
	requests int
}

// DefaultDemoSink fails 5% of the records permanently and 20% transiently (twice each).
func DefaultDemoSink() *DemoSink {
	return &DemoSink{
		Permanent: func(n int) bool { return n%20 == 0 },
		Transient: func(n int) int {
			if n%10 == 3 || n%10 == 7 {
				return 2
			}
			return 0
		},
	}
}

// ServeHTTP answers one delivery.
func (s *DemoSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get("Kafka-Key")
	n, err := strconv.Atoi(strings.TrimPrefix(key, "demo-"))
	if err != nil {
		n = -1
	}
	c := s.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	if s.Cost > 0 {
		waiter, ok := c.(clock.Clock)
		if !ok {
			waiter = clock.RealClock{}
		}
		select {
		case <-r.Context().Done():
			return
		case <-waiter.After(s.Cost):
		}
	}
	now := c.Now()
	s.mu.Lock()
	if s.attempts == nil {
		s.attempts, s.ok = map[string][]time.Time{}, map[string]time.Time{}
	}
	s.requests++
	down := s.down
	if !down {
		s.attempts[key] = append(s.attempts[key], now)
	}
	tries := len(s.attempts[key])
	s.mu.Unlock()

	switch {
	case down:
		http.Error(w, "demo: the sink is down", http.StatusServiceUnavailable)
	case n >= 0 && s.Permanent != nil && s.Permanent(n):
		http.Error(w, "demo: this record is refused for good", http.StatusUnprocessableEntity)
	case n >= 0 && s.Transient != nil && tries <= s.Transient(n):
		http.Error(w, "demo: try again later", http.StatusServiceUnavailable)
	default:
		s.mu.Lock()
		if _, done := s.ok[key]; !done {
			s.ok[key] = now
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}
}

// SetDown makes the sink answer every request with 503 (down) or behave as usual again. Requests
// while down are not recorded as attempts.
func (s *DemoSink) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// Attempts returns the times of every delivery of the record with key.
func (s *DemoSink) Attempts(key string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts[key]...)
}

// FirstRetryDelays returns, sorted, the time from each record's first delivery to its second, for
// the records delivered at least twice: how the policy's first delay and its jitter came out.
func (s *DemoSink) FirstRetryDelays() []time.Duration {
	s.mu.Lock()
	var out []time.Duration
	for _, at := range s.attempts {
		if len(at) >= 2 {
			out = append(out, at[1].Sub(at[0]))
		}
	}
	s.mu.Unlock()
	slices.Sort(out)
	return out
}

// Deciles formats the 10th, 50th and 90th percentiles of sorted durations, rounded to milliseconds
// ("-" when there are none).
func Deciles(sorted []time.Duration) string {
	if len(sorted) == 0 {
		return "-"
	}
	q := func(p int) time.Duration {
		return sorted[min(p*len(sorted)/100, len(sorted)-1)].Round(time.Millisecond)
	}
	return fmt.Sprintf("p10 %v, p50 %v, p90 %v", q(10), q(50), q(90))
}

// Succeeded returns how many distinct records were delivered successfully.
func (s *DemoSink) Succeeded() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ok)
}

// Requests returns the number of deliveries received.
func (s *DemoSink) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// DemoKey is the key of demo record n.
func DemoKey(n int) string { return fmt.Sprintf("demo-%d", n) }

// Produce writes records demo-<from>..demo-<to-1> to topic, at most perSecond a second (0: as fast
// as possible), and waits for every acknowledgement. kafka are the client's options: the brokers and
// how to reach them (Stack.KafkaOptions).
func Produce(ctx context.Context, kafka []kgo.Opt, topic string, from, to, perSecond int) error {
	cl, err := kgo.NewClient(append(slices.Clip(kafka), kgo.AllowAutoTopicCreation())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	var tick <-chan time.Time
	if perSecond > 0 {
		// The pace of a live demo against a real broker: the real clock.
		t := clock.RealClock{}.NewTicker(time.Second / time.Duration(perSecond))
		defer t.Stop()
		tick = t.C()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for n := from; n < to; n++ {
		if tick != nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick:
			}
		}
		wg.Add(1)
		rec := &kgo.Record{Topic: topic, Key: []byte(DemoKey(n)), Value: fmt.Appendf(nil, `{"n":%d,"task":"demo"}`, n)}
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstErr
}
