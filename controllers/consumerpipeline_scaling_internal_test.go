package controllers

import (
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// An autoscaled pipeline that is scaling (a scale up, a wake from zero) stays DeploymentReady True,
// reason Scaling, while its new pods start; a rollout, a progress deadline, a problem, or pods not
// ready outside the scaling grace are reported as before.
func TestSetPipelineDeploymentScaling(t *testing.T) {
	stalled := appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: reasonProgressDeadlineExceeded, Message: "timed out"}
	for name, tc := range map[string]struct {
		scaling    bool
		status     appsv1.DeploymentStatus
		problems   problems
		wantStatus metav1.ConditionStatus
		wantReason string
	}{
		"scaling up, 1 of 4 ready":                                    {true, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 1}, nil, metav1.ConditionTrue, reasonScaling},
		"woken from zero, none ready yet":                             {true, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 1, UpdatedReplicas: 1}, nil, metav1.ConditionTrue, reasonScaling},
		"the Deployment controller has not seen the new replicas yet": {true, appsv1.DeploymentStatus{ObservedGeneration: 2}, nil, metav1.ConditionTrue, reasonScaling},
		"not scaling: pods lost":                                      {false, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 1}, nil, metav1.ConditionFalse, reasonUnavailable},
		"a rollout: old pods":                                         {true, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 5, UpdatedReplicas: 2, ReadyReplicas: 3}, nil, metav1.ConditionFalse, reasonProgressing},
		"progress deadline":                                           {true, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 1, Conditions: []appsv1.DeploymentCondition{stalled}}, nil, metav1.ConditionFalse, reasonProgressDeadlineExceeded},
		"a problem wins":                                              {true, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4}, problems{{Reason: "ChildConflict", Kind: problemUser, Message: "x"}}, metav1.ConditionFalse, "ChildConflict"},
		"all ready: Available":                                        {true, appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 4, UpdatedReplicas: 4, ReadyReplicas: 4}, nil, metav1.ConditionTrue, reasonAvailable},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "orders-dispatcher", Generation: 3},
				Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](4)}, Status: tc.status}
			p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Generation: 9}}
			st := &retryv1alpha1.ConsumerPipelineStatus{}
			setPipelineDeployment(st, 9, d, tc.problems)
			setPipelineDeploymentScaling(st, p, pipelineChildren{deployment: d, scaling: tc.scaling, deploymentProblems: tc.problems})
			c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionDeploymentReady)
			g.Expect(c.Status).To(Equal(tc.wantStatus))
			g.Expect(c.Reason).To(Equal(tc.wantReason))
			if tc.wantReason == reasonScaling {
				g.Expect(c.Message).To(Equal("Deployment orders-dispatcher is scaling to 4 pods, " + map[bool]string{true: "1", false: "0"}[tc.status.ReadyReplicas == 1] + " ready"))
			}
		})
	}
}

// Scaling steps of a pipeline that stays Ready are no event; a Ready that changes otherwise is.
func TestScalingOnlyIsQuiet(t *testing.T) {
	g := NewWithT(t)
	c := func(status metav1.ConditionStatus, reason string) *metav1.Condition {
		return &metav1.Condition{Type: retryv1alpha1.ConditionReady, Status: status, Reason: reason}
	}
	g.Expect(scalingOnly(c(metav1.ConditionTrue, reasonAvailable), c(metav1.ConditionTrue, reasonScaling))).To(BeTrue())
	g.Expect(scalingOnly(c(metav1.ConditionTrue, reasonScaling), c(metav1.ConditionTrue, reasonAvailable))).To(BeTrue())
	g.Expect(scalingOnly(c(metav1.ConditionTrue, reasonScaling), c(metav1.ConditionTrue, reasonScaling))).To(BeTrue())
	g.Expect(scalingOnly(c(metav1.ConditionTrue, reasonAvailable), c(metav1.ConditionTrue, reasonAvailable))).To(BeFalse(), "a message change of a pipeline not scaling is news")
	g.Expect(scalingOnly(c(metav1.ConditionFalse, reasonUnavailable), c(metav1.ConditionTrue, reasonScaling))).To(BeFalse(), "ready again")
	g.Expect(scalingOnly(nil, c(metav1.ConditionTrue, reasonScaling))).To(BeFalse(), "ready for the first time")
}
