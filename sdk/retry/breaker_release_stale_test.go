package retry_test

import (
	"testing"

	"github.com/retryops/retry-operator/sdk/retry"
)

// TestBreakerReleaseOfAnEarlierPermitFreesNoProbe: a permit admitted while the breaker was closed
// (a record waiting for its batch to fill, a slow delivery) and handed back unused once the
// breaker is half-open is not one of the probes: it frees none, so no more than halfOpenRequests
// probes reach a sink that may still be down.
func TestBreakerReleaseOfAnEarlierPermitFreesNoProbe(t *testing.T) {
	h := newHarness(t, func(c *retry.CircuitBreakerConfig) { c.HalfOpenRequests, c.CloseSuccessPercent = 1, 50 })
	var early []retry.Permit
	for range 3 {
		p, ok := h.b.Admit()
		if !ok {
			t.Fatal("a closed breaker refused a request")
		}
		early = append(early, p)
	}
	h.halfOpen()
	probe, ok := h.b.Admit()
	if !ok {
		t.Fatal("the probe was not admitted")
	}
	for _, p := range early {
		h.b.Release(p)
		if _, ok := h.b.Admit(); ok {
			t.Fatal("a second probe admitted with halfOpenRequests 1: a permit from before the half-open state freed one")
		}
	}
	h.b.Release(probe)
	if _, ok := h.b.Admit(); !ok {
		t.Fatal("no probe admitted after the probe was handed back unused")
	}
}
