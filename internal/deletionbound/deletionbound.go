// Package deletionbound bounds how long the deletion of a resource waits for an external system
// (Kafka) to delete what the resource made, so that an unreachable system never wedges it: every
// attempt runs within the deadline, the deletion timestamp plus the bound; once the deadline has
// passed, a resource that already failed an attempt makes no new one and lets go, and one that never
// tried (its operator was down, say) gets one last attempt.
package deletionbound

import (
	"context"
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// Deadline is when a deleting o stops waiting and lets go: its deletion timestamp plus bound (zero
// when o is not being deleted).
func Deadline(o metav1.Object, bound time.Duration) time.Time {
	ts := o.GetDeletionTimestamp()
	if ts == nil {
		return time.Time{}
	}
	return ts.Add(bound)
}

// ErrPassed stands for "no new attempt: the deletion bound has passed".
var ErrPassed = errors.New("deletion bound passed")

// Attempt bounds one attempt by deadline, so that no attempt runs past it. Once the deadline has
// passed, a resource that already failed an attempt (failed) makes no new one and ctx is nil; one
// that never tried gets one attempt, bounded by the external system's own timeouts only.
func Attempt(ctx context.Context, clk clock.PassiveClock, deadline time.Time, failed bool) (context.Context, context.CancelFunc) {
	if clk.Now().Before(deadline) {
		return context.WithDeadline(ctx, deadline)
	}
	if failed {
		return nil, func() {}
	}
	return context.WithCancel(ctx)
}

// LastError is the failure the last attempt recorded, if one failed, for the final word.
func LastError(failure string, failed bool) string {
	if failed {
		return failure
	}
	return "the deletion bound passed"
}
