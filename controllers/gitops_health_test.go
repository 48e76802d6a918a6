package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// kstatusOf reads obj afresh and computes its kstatus (what `flux wait`, `kubectl wait
// --for=jsonpath`-style tools and Argo CD-like health checks built on cli-utils see).
func kstatusOf(obj client.Object) func() (*status.Result, error) {
	return func() (*status.Result, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return nil, err
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, err
		}
		return status.Compute(&unstructured.Unstructured{Object: m})
	}
}

// stalledOf returns obj's Stalled condition after reading it afresh, or nil.
func stalledOf(obj client.Object, conditions func() []metav1.Condition) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(conditions(), retryv1alpha1.ConditionStalled), nil
	}
}

func hasStatus(s status.Status) OmegaMatcher {
	return And(Not(BeNil()), HaveField("Status", s))
}

// TestUserErrorsStallAndKstatusSaysFailed: a resource whose spec needs changing (an invalid
// RetryPolicy pattern, a pipeline template with an unknown field, a DeadLetterQueue whose Secret
// holds an unusable CA) shows Stalled=True with the reason and message of the error, so kstatus
// computes Failed at once instead of InProgress until a timeout; a healthy one has no Stalled
// condition and kstatus computes Current. Fixing the spec clears Stalled.
func TestUserErrorsStallAndKstatusSaysFailed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)

	// RetryPolicy.
	good := backoffPolicy(ns, "policy", 2, time.Second, 2*time.Second)
	bad := samplePolicy(t, "delegation", ns)
	bad.Spec.Classification.Rules[1].MessagePatterns = append(bad.Spec.Classification.Rules[1].MessagePatterns, "(?i)timeout(")
	g.Expect(env.Client.Create(ctx, good)).To(Succeed())
	g.Expect(env.Client.Create(ctx, bad)).To(Succeed())
	policyConds := func(p *retryv1alpha1.RetryPolicy) func() []metav1.Condition {
		return func() []metav1.Condition { return p.Status.Conditions }
	}
	g.Eventually(stalledOf(bad, policyConds(bad)), wait, poll).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec),
		HaveField("Message", ContainSubstring(`"(?i)timeout("`)), HaveField("ObservedGeneration", bad.Generation)))
	g.Eventually(kstatusOf(bad), wait, poll).Should(And(hasStatus(status.FailedStatus), HaveField("Message", ContainSubstring("timeout("))))
	g.Eventually(kstatusOf(good), wait, poll).Should(hasStatus(status.CurrentStatus))
	g.Expect(meta.FindStatusCondition(good.Status.Conditions, retryv1alpha1.ConditionStalled)).To(BeNil())

	// DeadLetterQueue: healthy, and one whose CA Secret is not PEM.
	g.Eventually(kstatusOf(dlq), wait, poll).Should(hasStatus(status.CurrentStatus))
	g.Expect(env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ca"},
		StringData: map[string]string{"ca.crt": "not a certificate"}})).To(Succeed())
	badQueue := newDLQ(ns, "bad-ca", ns+".bad-ca")
	badQueue.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: broker.ListenAddrs(),
		TLS: &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "ca"}}}
	g.Expect(env.Client.Create(ctx, badQueue)).To(Succeed())
	g.Eventually(stalledOf(badQueue, func() []metav1.Condition { return badQueue.Status.Conditions }), wait, poll).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec)))
	g.Eventually(kstatusOf(badQueue), wait, poll).Should(hasStatus(status.FailedStatus))

	// ConsumerPipeline: healthy once its Deployment rolled out; a template with an unknown field.
	p := newPipeline(ns, "healthy", ns+".healthy", "policy", dlq.Name)
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	rollOut(t, p)
	g.Eventually(pipelineReady(p), wait, poll).Should(isReady())
	g.Eventually(kstatusOf(p), wait, poll).Should(hasStatus(status.CurrentStatus))
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionStalled)).To(BeNil())

	typo := newPipeline(ns, "typo", ns+".typo", "policy", dlq.Name)
	typo.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	typo.Spec.Sink = nil
	typo.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
	u := &unstructured.Unstructured{}
	g.Expect(env.Client.Scheme().Convert(typo, u, nil)).To(Succeed())
	u.SetGroupVersionKind(retryv1alpha1.GroupVersion.WithKind("ConsumerPipeline"))
	g.Expect(unstructured.SetNestedField(u.Object, "Always", "spec", "template", "spec", "restartPolicyy")).To(Succeed())
	g.Expect(env.Client.Create(ctx, u)).To(Succeed())
	pipelineConds := func() []metav1.Condition { return typo.Status.Conditions }
	g.Eventually(stalledOf(typo, pipelineConds), wait, poll).Should(And(Not(BeNil()),
		HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec),
		HaveField("Message", ContainSubstring("restartPolicyy"))))
	g.Eventually(kstatusOf(typo), wait, poll).Should(hasStatus(status.FailedStatus))

	// The fix clears it.
	update(t, typo, func(p *retryv1alpha1.ConsumerPipeline) {
		p.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}}}
	})
	g.Eventually(func() (*metav1.Condition, error) {
		c, err := pipelineCondition(typo, retryv1alpha1.ConditionDeploymentReady)()
		if c == nil || err != nil {
			return nil, err
		}
		return meta.FindStatusCondition(typo.Status.Conditions, retryv1alpha1.ConditionStalled), nil
	}, wait, poll).Should(BeNil())
}

// TestPipelineSurfacesAReplicaFailureAtOnce: when the Deployment controller cannot create the
// consumers' pods (a Pod Security rejection, a quota), it sets the Deployment's ReplicaFailure
// condition; the pipeline, which watches its Deployment, shows it in DeploymentReady and Ready at
// once (reason ReplicaFailure, the Deployment controller's message), not as a rollout in progress.
func TestPipelineSurfacesAReplicaFailureAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "policy", 2, time.Second, 2*time.Second))).To(Succeed())
	p := newPipeline(ns, "rejected", ns+".rejected", "policy", dlq.Name)
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	const forbidden = `pods "rejected-dispatcher-5d8f7" is forbidden: violates PodSecurity "restricted:latest": privileged (container "app" must not set securityContext.privileged=true)`
	setDeploymentStatus(t, p, func(d *appsv1.Deployment) {
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetCreated",
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
			{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: forbidden,
				LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()},
		}}
	})
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(And(notReady("ReplicaFailure"),
		HaveField("Message", And(ContainSubstring(render.DeploymentName(p)), ContainSubstring("FailedCreate"), ContainSubstring(forbidden)))))
	g.Eventually(pipelineReady(p), wait, poll).Should(And(notReady("ReplicaFailure"), HaveField("Message", ContainSubstring("is forbidden"))))

	// Once the pods can be made, the failure goes.
	setDeploymentStatus(t, p, func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	})
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(isReady())
}
