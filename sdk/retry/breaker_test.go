package retry_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/retry"
)

func newFakeClock() *clocktesting.FakeClock {
	return clocktesting.NewFakeClock(time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC))
}

type transition struct{ from, to retry.State }

// breakerHarness is a seed 001 breaker (50% over >= 10 requests in 60s, 30s open, 5 probes, >80%
// closes) on a fake clock, recording every state change.
type breakerHarness struct {
	t           *testing.T
	clock       *clocktesting.FakeClock
	b           *retry.Breaker
	transitions []transition
}

func newHarness(t *testing.T, mutate func(*retry.CircuitBreakerConfig)) *breakerHarness {
	t.Helper()
	h := &breakerHarness{t: t, clock: newFakeClock()}
	cfg := *seed001Breaker()
	if mutate != nil {
		mutate(&cfg)
	}
	b, err := retry.NewBreaker(cfg, h.clock, retry.OnStateChange(func(from, to retry.State) {
		h.transitions = append(h.transitions, transition{from, to})
	}))
	if err != nil {
		t.Fatalf("NewBreaker: %v", err)
	}
	h.b = b
	return h
}

// do admits and records n requests with the given result; every one must be admitted.
func (h *breakerHarness) do(n int, success bool) {
	h.t.Helper()
	for i := range n {
		if !h.b.Allow() {
			h.t.Fatalf("request %d of %d rejected in state %s", i+1, n, h.b.State())
		}
		h.b.Record(success)
	}
}

func (h *breakerHarness) wantState(s retry.State) {
	h.t.Helper()
	if got := h.b.State(); got != s {
		h.t.Fatalf("state %s, want %s", got, s)
	}
}

// open trips the breaker with 10 failures.
func (h *breakerHarness) open() {
	h.t.Helper()
	h.do(10, false)
	h.wantState(retry.StateOpen)
}

// halfOpen trips the breaker and waits out the cooldown.
func (h *breakerHarness) halfOpen() {
	h.t.Helper()
	h.open()
	h.clock.Step(30 * time.Second)
	h.wantState(retry.StateHalfOpen)
}

func TestBreaker(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*retry.CircuitBreakerConfig)
		run    func(h *breakerHarness)
	}{
		{
			name: "a closed breaker stays closed below minimumRequests even at 100% failures",
			run: func(h *breakerHarness) {
				h.do(9, false)
				h.wantState(retry.StateClosed)
			},
		},
		{
			name: "a closed breaker opens at more than 50% failures over at least 10 requests",
			run: func(h *breakerHarness) {
				h.do(4, true)
				h.do(5, false)
				h.wantState(retry.StateClosed) // 5 of 9 failed, but 9 < minimumRequests
				h.do(1, false)
				h.wantState(retry.StateOpen) // 6 of 10
			},
		},
		{
			name: "a success that brings the window to minimumRequests can open it",
			run: func(h *breakerHarness) {
				h.do(9, false)
				h.do(1, true)
				h.wantState(retry.StateOpen) // 9 of 10 failed
			},
		},
		{
			name: "exactly 50% failures do not open the breaker",
			run: func(h *breakerHarness) {
				h.do(5, false)
				h.do(5, true)
				h.wantState(retry.StateClosed)
				h.do(1, false) // 6 of 11
				h.wantState(retry.StateOpen)
			},
		},
		{
			name: "outcomes 59s old still count",
			run: func(h *breakerHarness) {
				h.do(9, false)
				h.clock.Step(59 * time.Second)
				h.do(1, false)
				h.wantState(retry.StateOpen)
			},
		},
		{
			name: "outcomes a whole window old slide out of it",
			run: func(h *breakerHarness) {
				h.do(9, false)
				h.clock.Step(60 * time.Second)
				h.do(1, false)
				h.wantState(retry.StateClosed) // 1 request in the window
				h.do(8, false)
				h.wantState(retry.StateClosed) // 9 requests in the window
				h.do(1, false)
				h.wantState(retry.StateOpen)
			},
		},
		{
			name: "outcomes slide out bucket by bucket",
			run: func(h *breakerHarness) {
				h.do(5, true) // t = 0
				h.clock.Step(30 * time.Second)
				h.do(5, false) // t = 30s: 5 of 10 failed
				h.wantState(retry.StateClosed)
				h.clock.Step(30 * time.Second)
				h.do(1, true) // t = 60s: the successes left, 5 of 6 failed but 6 < 10
				h.wantState(retry.StateClosed)
				h.do(4, false) // 9 of 10 failed
				h.wantState(retry.StateOpen)
			},
		},
		{
			name: "an open breaker rejects until openDuration has elapsed",
			run: func(h *breakerHarness) {
				h.open()
				opened := h.clock.Now()
				if until, ok := h.b.OpenUntil(); !ok || !until.Equal(opened.Add(30*time.Second)) {
					h.t.Fatalf("OpenUntil = %v, %v; want %v", until, ok, opened.Add(30*time.Second))
				}
				h.clock.Step(30*time.Second - time.Nanosecond)
				if h.b.Allow() {
					h.t.Fatal("an open breaker admitted a request before its cooldown ended")
				}
				h.wantState(retry.StateOpen)
				h.clock.Step(time.Nanosecond)
				h.wantState(retry.StateHalfOpen)
				if _, ok := h.b.OpenUntil(); ok {
					h.t.Fatal("OpenUntil reports a half-open breaker as open")
				}
			},
		},
		{
			name: "a half-open breaker admits only halfOpenRequests probes",
			run: func(h *breakerHarness) {
				h.halfOpen()
				for i := range 5 {
					if !h.b.Allow() {
						h.t.Fatalf("probe %d rejected", i+1)
					}
				}
				if h.b.Allow() {
					h.t.Fatal("a sixth probe was admitted")
				}
				h.clock.Step(time.Hour)
				if h.b.Allow() {
					h.t.Fatal("a probe was admitted after the five in flight, with time passing")
				}
				h.wantState(retry.StateHalfOpen)
			},
		},
		{
			name: "any failure in half-open reopens the breaker and restarts the cooldown",
			run: func(h *breakerHarness) {
				h.halfOpen()
				h.do(4, true)
				h.clock.Step(10 * time.Second)
				h.do(1, false)
				h.wantState(retry.StateOpen)
				h.clock.Step(29 * time.Second)
				h.wantState(retry.StateOpen)
				h.clock.Step(time.Second)
				h.wantState(retry.StateHalfOpen)
				h.do(5, true) // a fresh set of probes
				h.wantState(retry.StateClosed)
			},
		},
		{
			name: "successes above closeSuccessPercent close the breaker with an empty window",
			run: func(h *breakerHarness) {
				h.halfOpen()
				h.do(4, true)
				h.wantState(retry.StateHalfOpen) // 4*100 = 400 is not above 80*5
				h.do(1, true)
				h.wantState(retry.StateClosed) // 500 > 400
				h.do(9, false)
				h.wantState(retry.StateClosed) // the failures that opened it are forgotten
			},
		},
		{
			name:   "a lower closeSuccessPercent closes before every probe has answered",
			mutate: func(c *retry.CircuitBreakerConfig) { c.CloseSuccessPercent = 50; c.HalfOpenRequests = 4 },
			run: func(h *breakerHarness) {
				h.halfOpen()
				h.do(2, true)
				h.wantState(retry.StateHalfOpen) // 200 is not above 200
				h.do(1, true)
				h.wantState(retry.StateClosed) // 300 > 200
			},
		},
		{
			name: "outcomes recorded while open are ignored and do not restart the cooldown",
			run: func(h *breakerHarness) {
				h.open()
				h.clock.Step(20 * time.Second)
				h.b.Record(false)
				h.b.Record(true)
				h.clock.Step(10 * time.Second)
				h.wantState(retry.StateHalfOpen)
			},
		},
		{
			name:   "a failure ratio of 100 never opens",
			mutate: func(c *retry.CircuitBreakerConfig) { c.FailureRatioPercent = 100 },
			run: func(h *breakerHarness) {
				h.do(1000, false)
				h.wantState(retry.StateClosed)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(newHarness(t, tc.mutate))
		})
	}
}

func TestBreakerHookFiresOncePerTransition(t *testing.T) {
	h := newHarness(t, nil)
	h.do(10, false) // Closed -> Open
	h.b.Allow()     // rejected: no transition
	h.clock.Step(30 * time.Second)
	h.b.State()       // Open -> HalfOpen
	h.b.State()       // no transition
	h.do(1, false)    // HalfOpen -> Open
	h.b.Record(false) // ignored while open
	h.clock.Step(30 * time.Second)
	h.do(5, true) // Open -> HalfOpen (on Allow), HalfOpen -> Closed
	h.do(3, true)
	want := []transition{
		{retry.StateClosed, retry.StateOpen},
		{retry.StateOpen, retry.StateHalfOpen},
		{retry.StateHalfOpen, retry.StateOpen},
		{retry.StateOpen, retry.StateHalfOpen},
		{retry.StateHalfOpen, retry.StateClosed},
	}
	if !slices.Equal(h.transitions, want) {
		t.Fatalf("transitions %v, want %v", h.transitions, want)
	}
}

func TestBreakerIsSafeForConcurrentUse(t *testing.T) {
	h := newHarness(t, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				if h.b.Allow() {
					h.b.Record(i%3 != 0)
				}
				if i%100 == 0 {
					h.clock.Step(time.Second)
				}
			}
		}()
	}
	wg.Wait()
	switch s := h.b.State(); s {
	case retry.StateClosed, retry.StateOpen, retry.StateHalfOpen:
	default:
		t.Fatalf("state %q", s)
	}
	// Transitions chain: each starts where the previous one ended.
	prev := retry.StateClosed
	for _, tr := range h.transitions {
		if tr.from != prev || tr.from == tr.to {
			t.Fatalf("transition %v does not follow state %s", tr, prev)
		}
		prev = tr.to
	}
}
