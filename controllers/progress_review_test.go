package controllers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// TestAClockSetBackDoesNotPostponeTheWarning: the wall clock stepped back (an NTP correction)
// during an episode must not add the step to the grace period: the reference is missing for
// ReferenceGracePeriod as the clock counts from then on, and that is worth the Warning.
func TestAClockSetBackDoesNotPostponeTheWarning(t *testing.T) {
	policy := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: `RetryPolicy "typo" not found`}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	m := newMissingReferences(clk)
	if got := m.observe(keyOfUID("a"), "a", problems{policy}); got != nil {
		t.Fatalf("warned at once: %q", got)
	}
	clk.SetTime(start.Add(-time.Hour))
	if got := m.observe(keyOfUID("a"), "a", problems{policy}); got != nil {
		t.Fatalf("warned when the clock went back: %q", got)
	}
	clk.SetTime(start.Add(-time.Hour + ReferenceGracePeriod))
	if got := m.observe(keyOfUID("a"), "a", problems{policy}); len(got) != 1 {
		t.Fatalf("Warnings %q after the grace period counted since the clock went back, want one", got)
	}
}

// TestConcurrentReconcilesKeepTheirEpisodes: reconciles of different resources observe at once
// (MaxConcurrentReconciles); each resource gets its one Warning, and -race finds no data race.
func TestConcurrentReconcilesKeepTheirEpisodes(t *testing.T) {
	policy := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: `RetryPolicy "typo" not found`}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	m := newMissingReferences(clk)
	const n = 50
	observeAll := func() []int {
		warned := make([]int, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				uid := types.UID(fmt.Sprint(i))
				for range 3 {
					warned[i] += len(m.observe(keyOfUID(uid), uid, problems{policy}))
				}
			})
		}
		wg.Wait()
		return warned
	}
	observeAll()
	clk.SetTime(start.Add(ReferenceGracePeriod))
	for i, w := range observeAll() {
		if w != 1 {
			t.Fatalf("resource %d: %d Warnings, want 1", i, w)
		}
	}
	for i := range n {
		m.forget(keyOfUID(types.UID(fmt.Sprint(i))))
	}
	if len(m.byName) != 0 {
		t.Fatalf("kept %d resources after each was forgotten", len(m.byName))
	}
}
