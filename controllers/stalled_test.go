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

func TestSetStalled(t *testing.T) {
	user := func(reason, msg string) *problem { return &problem{Reason: reason, Kind: problemUser, Message: msg} }
	for name, tc := range map[string]struct {
		ps          problems
		wantReason  string
		wantMessage string
	}{
		"no problem":                  {nil, "", ""},
		"waiting only":                {problems{{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Message: "no policy"}}, "", ""},
		"transient only":              {problems{{Reason: retryv1alpha1.ReasonKafkaUnavailable, Kind: problemTransient, Message: "down"}}, "", ""},
		"a user error":                {problems{user(retryv1alpha1.ReasonInvalidSpec, "bad pattern")}, retryv1alpha1.ReasonInvalidSpec, "bad pattern"},
		"after a transient, the user": {problems{{Reason: retryv1alpha1.ReasonKafkaUnavailable, Kind: problemTransient, Message: "down"}, user("TopicClaimRefused", "not yours")}, "TopicClaimRefused", "not yours"},
		"two user errors":             {problems{user(retryv1alpha1.ReasonInvalidSpec, "a"), user(retryv1alpha1.ReasonInvalidSpec, "b")}, retryv1alpha1.ReasonInvalidSpec, "a; b"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			// A previous Stalled is replaced or removed.
			conds := []metav1.Condition{{Type: retryv1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: "Old", Message: "old", ObservedGeneration: 1}}
			setStalled(&conds, 2, tc.ps)
			c := meta.FindStatusCondition(conds, retryv1alpha1.ConditionStalled)
			if tc.wantReason == "" {
				g.Expect(c).To(BeNil())
				return
			}
			g.Expect(c).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", tc.wantReason),
				HaveField("Message", tc.wantMessage), HaveField("ObservedGeneration", int64(2))))
		})
	}
}

// TestReplicaFailureAndStalledDeployment: the Deployment's ReplicaFailure is DeploymentReady's reason
// at once (for the spec the Deployment controller has seen), and a rollout past its progress
// deadline stalls the pipeline, as kstatus says of the Deployment itself.
func TestReplicaFailureAndStalledDeployment(t *testing.T) {
	g := NewWithT(t)
	failure := appsv1.DeploymentCondition{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate",
		Message: `pods "orders-dispatcher-x" is forbidden: violates PodSecurity "restricted:latest"`}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "orders-dispatcher", Generation: 2}, Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](1)},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 2, Conditions: []appsv1.DeploymentCondition{failure}}}
	c := deploymentReadyCondition(d, 5)
	g.Expect(c).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", retryv1alpha1.ReasonReplicaFailure),
		HaveField("Message", `Deployment orders-dispatcher cannot create pods: FailedCreate: pods "orders-dispatcher-x" is forbidden: violates PodSecurity "restricted:latest"`)))

	// A newer spec the Deployment controller has not seen may have fixed it.
	d.Generation = 3
	g.Expect(deploymentReadyCondition(d, 6).Reason).To(Equal(reasonProgressing))

	st := &retryv1alpha1.ConsumerPipelineStatus{}
	setPipelineDeployment(st, 6, d, nil)
	setPipelineStalled(st, 6, nil)
	g.Expect(meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionStalled)).To(BeNil(), "a replica failure (a quota, say) may pass by itself")

	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 3, Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing,
		Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "orders-dispatcher-1" has timed out progressing.`}}}
	setPipelineDeployment(st, 6, d, nil)
	setPipelineStalled(st, 6, nil)
	g.Expect(meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionStalled)).To(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue),
		HaveField("Reason", reasonProgressDeadlineExceeded), HaveField("Message", ContainSubstring("has timed out progressing"))))
}
