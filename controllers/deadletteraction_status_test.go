package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// cond is what a status-function table test checks of a condition; Status "" means absent.
type cond struct {
	Status             metav1.ConditionStatus
	Reason, Message    string
	ObservedGeneration int64
}

func condOf(conditions []metav1.Condition, t string) cond {
	c := meta.FindStatusCondition(conditions, t)
	if c == nil {
		return cond{}
	}
	return cond{c.Status, c.Reason, c.Message, c.ObservedGeneration}
}

func Test_setActionConditions(t *testing.T) {
	refused := &problem{Reason: retryv1alpha1.ReasonReplayTargetRefused, Kind: problemUser, Message: "refused"}
	waiting := &problem{Reason: reasonActionWaiting, Kind: problemWaiting, Message: "waiting for replay"}
	interrupted := &problem{Reason: reasonRunInterrupted, Kind: problemTransient, Message: "the run stopped"}
	// Conditions of an earlier generation, Stalled among them: each case replaces or removes them.
	earlier := []metav1.Condition{
		{Type: retryv1alpha1.ConditionReady, Status: metav1.ConditionUnknown, Reason: "Old", ObservedGeneration: 1},
		{Type: retryv1alpha1.ConditionComplete, Status: metav1.ConditionUnknown, Reason: "Old", ObservedGeneration: 1},
		{Type: retryv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1},
	}
	for name, tc := range map[string]struct {
		phase                                retryv1alpha1.DeadLetterActionPhase
		p                                    *problem
		wantReady, wantComplete, wantStalled cond
	}{
		"pending, nothing holds it": {retryv1alpha1.ActionPending, nil,
			cond{metav1.ConditionFalse, reasonActionWaiting, "The action has not started", 2},
			cond{metav1.ConditionFalse, reasonActionWaiting, "The action has not started", 2}, cond{}},
		"pending behind another action: not stalled": {retryv1alpha1.ActionPending, waiting,
			cond{metav1.ConditionFalse, reasonActionWaiting, "waiting for replay", 2},
			cond{metav1.ConditionFalse, reasonActionWaiting, "The action has not started", 2}, cond{}},
		"pending on a user error: stalled": {retryv1alpha1.ActionPending, refused,
			cond{metav1.ConditionFalse, retryv1alpha1.ReasonReplayTargetRefused, "refused", 2},
			cond{metav1.ConditionFalse, retryv1alpha1.ReasonReplayTargetRefused, "The action has not started", 2},
			cond{metav1.ConditionTrue, retryv1alpha1.ReasonReplayTargetRefused, "refused", 2}},
		"running": {retryv1alpha1.ActionRunning, nil,
			cond{metav1.ConditionFalse, reasonActionRunning, "The action is running: done 3 of 5 matched, 1 skipped, 0 failed", 2},
			cond{metav1.ConditionFalse, reasonActionRunning, "The action is running", 2}, cond{}},
		"running, interrupted: the problem shows on Ready": {retryv1alpha1.ActionRunning, interrupted,
			cond{metav1.ConditionFalse, reasonRunInterrupted, "the run stopped", 2},
			cond{metav1.ConditionFalse, reasonActionRunning, "The action is running", 2}, cond{}},
		"succeeded": {retryv1alpha1.ActionSucceeded, nil,
			cond{metav1.ConditionTrue, reasonActionSucceeded, "The action completed: done 3 of 5 matched, 1 skipped, 0 failed", 2},
			cond{metav1.ConditionTrue, reasonActionSucceeded, "The action completed", 2}, cond{}},
		"failed: complete and stalled": {retryv1alpha1.ActionFailed, refused,
			cond{metav1.ConditionFalse, retryv1alpha1.ReasonReplayTargetRefused, "refused", 2},
			cond{metav1.ConditionTrue, reasonActionFailed, "The action failed: refused", 2},
			cond{metav1.ConditionTrue, retryv1alpha1.ReasonReplayTargetRefused, "refused", 2}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := &retryv1alpha1.DeadLetterActionStatus{Phase: tc.phase, Matched: 5, Done: 3, Skipped: 1,
				Conditions: append([]metav1.Condition(nil), earlier...)}
			setActionConditions(st, 2, tc.p)
			g.Expect(condOf(st.Conditions, retryv1alpha1.ConditionReady)).To(Equal(tc.wantReady), "Ready")
			g.Expect(condOf(st.Conditions, retryv1alpha1.ConditionComplete)).To(Equal(tc.wantComplete), "Complete")
			g.Expect(condOf(st.Conditions, retryv1alpha1.ConditionStalled)).To(Equal(tc.wantStalled), "Stalled")
		})
	}
}
