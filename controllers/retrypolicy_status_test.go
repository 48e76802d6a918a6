package controllers

import (
	"errors"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func Test_setPolicyReady(t *testing.T) {
	long := errors.New(strings.Repeat("y", maxConditionMessage+5))
	schedule := []v1.ScheduledRetry{{Attempt: 2}, {Attempt: 3}}
	total := &v1.DelayBounds{Earliest: metav1.Duration{Duration: 3 * time.Second}, Latest: metav1.Duration{Duration: 90 * time.Second}}
	for name, tc := range map[string]struct {
		schedule    []v1.ScheduledRetry
		specErr     error
		wantReady   cond
		wantStalled cond
	}{
		"retries: Valid, how many and over how long": {schedule, nil,
			cond{metav1.ConditionTrue, v1.ReasonValid, "2 retries over 3s to 1m30s", 2}, cond{}},
		"no retries: Valid, straight to the dead letter queue": {nil, nil,
			cond{metav1.ConditionTrue, v1.ReasonValid, "no retries: a failed delivery goes to the dead letter queue at once", 2}, cond{}},
		"invalid spec: InvalidSpec with the problem, stalled": {nil, errors.New("backoff.multiplier: must be at least 1"),
			cond{metav1.ConditionFalse, v1.ReasonInvalidSpec, "backoff.multiplier: must be at least 1", 2},
			cond{metav1.ConditionTrue, v1.ReasonInvalidSpec, "backoff.multiplier: must be at least 1", 2}},
		"a long problem is cut": {nil, long,
			cond{metav1.ConditionFalse, v1.ReasonInvalidSpec, truncate(long.Error(), maxConditionMessage), 2},
			cond{metav1.ConditionTrue, v1.ReasonInvalidSpec, truncate(long.Error(), maxConditionMessage), 2}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			st := &v1.RetryPolicyStatus{Schedule: tc.schedule, TotalDelay: total, Conditions: []metav1.Condition{
				{Type: v1.ConditionReady, Status: metav1.ConditionUnknown, Reason: "Old", ObservedGeneration: 1},
				{Type: v1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old", ObservedGeneration: 1},
			}}
			setPolicyReady(st, 2, tc.specErr)
			setPolicyStalled(st, 2, tc.specErr)
			g.Expect(condOf(st.Conditions, v1.ConditionReady)).To(Equal(tc.wantReady), "Ready")
			g.Expect(condOf(st.Conditions, v1.ConditionStalled)).To(Equal(tc.wantStalled), "Stalled")
		})
	}
}
