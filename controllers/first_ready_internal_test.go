package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func TestOnlyAFirstReadyReachedQuietlyNeedsNoEvent(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string) *metav1.Condition {
		return &metav1.Condition{Type: retryv1alpha1.ConditionReady, Status: status, Reason: reason}
	}
	ready := cond(metav1.ConditionTrue, retryv1alpha1.ReasonTopicReady)
	for _, tc := range []struct {
		name   string
		before *metav1.Condition
		want   bool
	}{
		{"a first status", nil, true},
		{"after a first reconcile", cond(metav1.ConditionFalse, retryv1alpha1.ReasonReconciling), true},
		{"after a rollout", cond(metav1.ConditionFalse, reasonProgressing), true},
		{"after a Warning", cond(metav1.ConditionFalse, retryv1alpha1.ReasonKafkaUnavailable), false},
		{"after waiting for a reference", cond(metav1.ConditionFalse, retryv1alpha1.ReasonReferenceNotFound), false},
		{"after an invalid spec", cond(metav1.ConditionFalse, retryv1alpha1.ReasonInvalidSpec), false},
		{"Ready already, its message changed", cond(metav1.ConditionTrue, retryv1alpha1.ReasonTopicReady), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstReady(tc.before, ready); got != tc.want {
				t.Errorf("firstReady = %v, want %v", got, tc.want)
			}
		})
	}
}
