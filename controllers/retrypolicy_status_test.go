package controllers

import (
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func Test_setPolicyReady(t *testing.T) {
	long := errors.New(strings.Repeat("y", maxConditionMessage+5))
	schedule := []retryv1alpha1.ScheduledRetry{{Attempt: 2}, {Attempt: 3}}
	total := &retryv1alpha1.DelayBounds{Earliest: metav1.Duration{Duration: 3 * time.Second}, Latest: metav1.Duration{Duration: 90 * time.Second}}
	for name, tc := range map[string]struct {
		schedule    []retryv1alpha1.ScheduledRetry
		specErr     error
		wantReady   cond
		wantStalled cond
	}{
		"retries: Valid, how many and over how long": {schedule, nil,
			cond{metav1.ConditionTrue, retryv1alpha1.ReasonValid, "2 retries over 3s to 1m30s", 2}, cond{}},
		"no retries: Valid, straight to the dead letter queue": {nil, nil,
			cond{metav1.ConditionTrue, retryv1alpha1.ReasonValid, "no retries: a failed delivery goes to the dead letter queue at once", 2}, cond{}},
		"invalid spec: InvalidSpec with the problem, stalled": {nil, errors.New("backoff.multiplier: must be at least 1"),
			cond{metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec, "backoff.multiplier: must be at least 1", 2},
			cond{metav1.ConditionTrue, retryv1alpha1.ReasonInvalidSpec, "backoff.multiplier: must be at least 1", 2}},
		"a long problem is cut": {nil, long,
			cond{metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec, truncate(long.Error(), maxConditionMessage), 2},
			cond{metav1.ConditionTrue, retryv1alpha1.ReasonInvalidSpec, truncate(long.Error(), maxConditionMessage), 2}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := &retryv1alpha1.RetryPolicyStatus{Schedule: tc.schedule, TotalDelay: total, Conditions: []metav1.Condition{
				{Type: retryv1alpha1.ConditionReady, Status: metav1.ConditionUnknown, Reason: "Old", ObservedGeneration: 1},
				{Type: retryv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1},
			}}
			setPolicyReady(st, 2, tc.specErr)
			setPolicyStalled(st, 2, tc.specErr)
			g.Expect(condOf(st.Conditions, retryv1alpha1.ConditionReady)).To(Equal(tc.wantReady), "Ready")
			g.Expect(condOf(st.Conditions, retryv1alpha1.ConditionStalled)).To(Equal(tc.wantStalled), "Stalled")
		})
	}
}
