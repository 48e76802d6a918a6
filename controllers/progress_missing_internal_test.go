package controllers

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func TestAReferenceMissingPastTheGracePeriodIsOneWarningPerEpisode(t *testing.T) {
	policy := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: `RetryPolicy "typo" not found`}
	queue := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: `DeadLetterQueue "dlq" not found`}
	conflict := &problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: "taken"}
	// A ReferenceNotFound that is no progress is a Warning already, at once (DeadLetterAction).
	action := &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Message: `DeadLetterQueue "gone" not found`}
	type step struct {
		after time.Duration // the clock stepped by this much before the reconcile
		uid   types.UID
		ps    problems
		want  []string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a reference on its way is no Warning", []step{
			{0, "a", problems{policy}, nil},
			{ReferenceGracePeriod - time.Second, "a", problems{policy}, nil},
			{time.Second, "a", nil, nil},
			{time.Hour, "a", nil, nil},
		}},
		{"one Warning once the grace period has passed, not one per resync", []step{
			{0, "a", problems{policy}, nil},
			{ReferenceGracePeriod - time.Second, "a", problems{policy}, nil},
			{time.Second, "a", problems{policy}, []string{`RetryPolicy "typo" not found (missing for 2m0s)`}},
			{30 * time.Second, "a", problems{policy}, nil},
			{time.Hour, "a", problems{conflict, policy}, nil},
		}},
		{"a reference that appears, then goes again, is a new episode", []step{
			{0, "a", problems{policy}, nil},
			{ReferenceGracePeriod, "a", problems{policy}, []string{`RetryPolicy "typo" not found (missing for 2m0s)`}},
			{time.Second, "a", problems{conflict}, nil},
			{time.Second, "a", problems{policy}, nil},
			{ReferenceGracePeriod + 30*time.Second, "a", problems{policy}, []string{`RetryPolicy "typo" not found (missing for 2m30s)`}},
		}},
		{"each reference has its own episode: one appearing does not restart the other's", []step{
			{0, "a", problems{queue, policy}, nil},
			{time.Minute, "a", problems{policy}, nil},
			{time.Minute, "a", problems{policy, queue}, []string{`RetryPolicy "typo" not found (missing for 2m0s)`}},
			{ReferenceGracePeriod, "a", problems{policy, queue}, []string{`DeadLetterQueue "dlq" not found (missing for 2m0s)`}},
		}},
		{"resources apart", []step{
			{0, "a", problems{policy}, nil},
			{time.Minute, "b", problems{policy}, nil},
			{time.Minute, "a", problems{policy}, []string{`RetryPolicy "typo" not found (missing for 2m0s)`}},
			{0, "b", problems{policy}, nil},
			{time.Minute, "b", problems{policy}, []string{`RetryPolicy "typo" not found (missing for 2m0s)`}},
		}},
		{"a reference missing without progress is not counted", []step{
			{0, "a", problems{action}, nil},
			{time.Hour, "a", problems{action}, nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			m := newMissingReferences(clk)
			for i, s := range tc.steps {
				clk.SetTime(clk.Now().Add(s.after))
				got := m.observe(keyOfUID(s.uid), s.uid, s.ps, time.Hour)
				if !slices.Equal(got, s.want) {
					t.Fatalf("step %d: Warnings %q, want %q", i, got, s.want)
				}
			}
		})
	}
}

func TestAResourceNoLongerMissingIsDropped(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	m := newMissingReferences(clk)
	missing := problems{{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true, Message: "x"}}
	m.observe(keyOfUID("a"), "a", missing, time.Minute)
	m.observe(keyOfUID("a"), "a", nil, time.Minute)
	if len(m.byName) != 0 || m.leases.Len() != 0 {
		t.Fatalf("kept %v", m.byName)
	}
	var none *missingReferences
	if got := none.observe(keyOfUID("a"), "a", missing, time.Minute); got != nil {
		t.Fatalf("a nil tracker warned: %q", got)
	}
}
