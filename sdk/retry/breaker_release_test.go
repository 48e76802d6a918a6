package retry_test

import (
	"slices"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

// TestBreakerReleaseIsNeitherOutcome: a permit handed back unused (the request was never made)
// neither closes a half-open breaker nor reopens it, and frees its probe for another request; in
// the closed state it counts in neither the requests nor the failures of the window.
func TestBreakerReleaseIsNeitherOutcome(t *testing.T) {
	t.Run("half-open", func(t *testing.T) {
		h := newHarness(t, func(c *retry.CircuitBreakerConfig) { c.HalfOpenRequests, c.CloseSuccessPercent = 1, 50 })
		h.halfOpen()
		probe, ok := h.b.Admit()
		if !ok {
			t.Fatal("the probe was not admitted")
		}
		if h.b.Allow() {
			t.Fatal("a second probe admitted with halfOpenRequests 1")
		}
		h.b.Release(probe)
		if got := h.b.State(); got != retry.StateHalfOpen {
			t.Fatalf("state %s after a probe was handed back unused, want %s", got, retry.StateHalfOpen)
		}
		// The probe is free again: another request is admitted, and its outcome decides.
		if !h.b.Allow() {
			t.Fatal("no probe admitted after one was handed back unused")
		}
		h.b.Record(true)
		h.wantState(retry.StateClosed)
		want := []transition{{retry.StateClosed, retry.StateOpen}, {retry.StateOpen, retry.StateHalfOpen}, {retry.StateHalfOpen, retry.StateClosed}}
		if !slices.Equal(h.transitions, want) {
			t.Errorf("transitions %v, want %v", h.transitions, want)
		}
	})
	t.Run("half-open, every probe handed back", func(t *testing.T) {
		h := newHarness(t, nil) // 5 probes, more than 80% close
		h.halfOpen()
		var probes []retry.Permit
		for range 5 {
			p, ok := h.b.Admit()
			if !ok {
				t.Fatal("a probe was not admitted")
			}
			probes = append(probes, p)
		}
		for _, p := range probes {
			h.b.Release(p)
		}
		// Releasing more than was admitted hands back nothing more.
		h.b.Release(probes[0])
		h.wantState(retry.StateHalfOpen)
		for i := range 5 {
			if !h.b.Allow() {
				t.Fatalf("probe %d of 5 not admitted after all were handed back", i+1)
			}
		}
		if h.b.Allow() {
			t.Fatal("a sixth probe admitted: a Release beyond the admitted probes gave an extra one")
		}
		h.b.Record(false)
		h.wantState(retry.StateOpen)
	})
	t.Run("closed", func(t *testing.T) {
		h := newHarness(t, nil) // opens at >50% failures over >= 10 requests
		h.do(5, false)
		for range 20 {
			p, ok := h.b.Admit()
			if !ok {
				t.Fatal("a closed breaker refused a request")
			}
			h.b.Release(p)
		}
		// Had a release counted as a success, 5 failures of 26 would keep it closed.
		h.do(5, false)
		h.wantState(retry.StateOpen)
	})
	t.Run("open", func(t *testing.T) {
		h := newHarness(t, nil)
		h.open()
		h.b.Release(retry.Permit{})
		h.clock.Step(30*time.Second - time.Millisecond)
		h.wantState(retry.StateOpen)
	})
}
