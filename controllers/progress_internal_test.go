package controllers

import (
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/lease"
)

func TestProgressIsANormalEventAndAProblemAWarning(t *testing.T) {
	waitingForPolicy := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true}
	waitingForQueue := &problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemWaiting, Progress: true}
	notOurs := &problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemUser}
	conflict := &problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting}
	for _, tc := range []struct {
		name   string
		reason string
		ps     problems
		want   bool
	}{
		{"a first reconcile", retryv1alpha1.ReasonReconciling, nil, true},
		{"a rollout under way", reasonProgressing, nil, true},
		{"pods that do not become ready", reasonUnavailable, nil, false},
		{"a policy not created yet", retryv1alpha1.ReasonReferenceNotFound, problems{waitingForPolicy}, true},
		{"a queue that has not made its topic yet, and a policy not there yet", retryv1alpha1.ReasonTopicNotOwned, problems{waitingForQueue, waitingForPolicy}, true},
		{"a topic of someone else's, of the same reason as waiting for a queue", retryv1alpha1.ReasonTopicNotOwned, problems{notOurs}, false},
		{"a conflict with another owner behind a reference not there yet", retryv1alpha1.ReasonReferenceNotFound, problems{waitingForPolicy, conflict}, false},
		{"a reason no problem gives", reasonUnavailable, problems{waitingForPolicy}, false},
		{"an invalid spec", retryv1alpha1.ReasonInvalidSpec, problems{{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := &metav1.Condition{Type: retryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: tc.reason}
			if got := tc.ps.progress(ready); got != tc.want {
				t.Errorf("progress = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAClockSetBackDoesNotPostponeTheWarning: the wall clock stepped back (an NTP correction)
// during an episode must not add the step to the grace period: the reference is missing for
// ReferenceGracePeriod as the clock counts from then on, and that is worth the Warning.
func TestAClockSetBackDoesNotPostponeTheWarning(t *testing.T) {
	policy := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: `RetryPolicy "typo" not found`}
	start := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	m := newMissingReferences(clk)
	if got := m.observe(keyOfUID("a"), "a", problems{policy}, time.Minute); got != nil {
		t.Fatalf("warned at once: %q", got)
	}
	clk.SetTime(start.Add(-time.Hour))
	if got := m.observe(keyOfUID("a"), "a", problems{policy}, time.Minute); got != nil {
		t.Fatalf("warned when the clock went back: %q", got)
	}
	clk.SetTime(start.Add(-time.Hour + ReferenceGracePeriod))
	if got := m.observe(keyOfUID("a"), "a", problems{policy}, time.Minute); len(got) != 1 {
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
					warned[i] += len(m.observe(keyOfUID(uid), uid, problems{policy}, time.Minute))
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
	// Deleted, they are reconciled no more: their episodes go once the lease is over.
	clk.SetTime(clk.Now().Add(lease.For(time.Minute) + lease.Min))
	m.observe(keyOfUID("other"), "other", nil, time.Minute)
	if len(m.byName) != 0 {
		t.Fatalf("kept %d resources after each was deleted", len(m.byName))
	}
}
