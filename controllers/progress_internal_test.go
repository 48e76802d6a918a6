package controllers

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
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
