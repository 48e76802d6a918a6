package controllers

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Which changes of Ready are worth an event, and of which type. A Ready that goes False on the
// way to True (a pipeline applied together with its policy and queue, a first rollout) is a Normal
// event, or none before a first Ready: a Warning is for what a person must look at, and a healthy
// apply of many resources must not fill `kubectl get events` with them.

// progressReasons are the reasons of a Ready that is not True yet on the way to True, set by no
// problem: a first reconcile, a rollout under way.
var progressReasons = []string{v1.ReasonReconciling, reasonProgressing}

// progress reports whether ready, not True, is normal progress: every problem of ps is Progress,
// and ready's reason is one of them or a progress reason.
func (ps problems) progress(ready *metav1.Condition) bool {
	for _, p := range ps {
		if !p.Progress {
			return false
		}
	}
	return slices.Contains(progressReasons, ready.Reason) || slices.ContainsFunc(ps, func(p *problem) bool { return p.Reason == ready.Reason })
}

// onWayToFirstReady reports whether ready, not True, with before the conditions it replaces, is a
// resource on its way to a first Ready (a first reconcile, a first rollout) and nothing else: no
// change a person must hear of, which would be one event per resource of a large apply.
func (ps problems) onWayToFirstReady(before []metav1.Condition, ready *metav1.Condition) bool {
	return !meta.IsStatusConditionTrue(before, v1.ConditionReady) && ps.progress(ready) && slices.Contains(progressReasons, ready.Reason)
}

// readyChanged tells whether a condition changed (status, reason or message): each such change is
// worth an event.
func readyChanged(before, after *metav1.Condition) bool {
	if after == nil {
		return false
	}
	return before == nil || before.Status != after.Status || before.Reason != after.Reason || before.Message != after.Message
}

// conditionChanged returns the condition condType of after, and whether it changed from before.
func conditionChanged(before, after []metav1.Condition, condType string) (*metav1.Condition, bool) {
	a := meta.FindStatusCondition(after, condType)
	return a, readyChanged(meta.FindStatusCondition(before, condType), a)
}

// firstReady reports whether a True Ready, after before, is the resource's first, reached without
// a Warning on the way (before is absent or a progress reason).
func firstReady(before, _ *metav1.Condition) bool {
	return before == nil || (before.Status != metav1.ConditionTrue && slices.Contains(progressReasons, before.Reason))
}
