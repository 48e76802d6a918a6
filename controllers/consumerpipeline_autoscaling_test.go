package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// spec.autoscaling makes an HPA (no KEDA here) on the pipeline's scale subresource and the external
// due-lag metric, with maxReplicas lowered to the partition count (2) and said so in status;
// removing spec.autoscaling deletes it.
func TestPipelineAutoscalingMakesAnHPAOnThePipeline(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	p, _, _ := pipelineWith(t, nil, func(p *retryv1alpha1.ConsumerPipeline) {
		p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 10, TargetDueLagPerReplica: ptr.To[int64](250),
			ScaleDownStabilization: &metav1.Duration{Duration: 90 * time.Second}}
	})
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.DeploymentName(p)}}
	g.Eventually(getter(hpa), wait, poll).Should(WithTransform(func(h *autoscalingv2.HorizontalPodAutoscaler) int32 { return h.Spec.MaxReplicas }, Equal(int32(2))))
	g.Expect(metav1.IsControlledBy(hpa, p)).To(BeTrue())
	g.Expect(hpa.Spec.ScaleTargetRef).To(Equal(autoscalingv2.CrossVersionObjectReference{APIVersion: "retry.retryops.dev/v1alpha1", Kind: "ConsumerPipeline", Name: p.Name}))
	g.Expect(hpa.Spec.MinReplicas).To(Equal(ptr.To[int32](1)))
	g.Expect(hpa.Spec.Metrics).To(HaveLen(1))
	ext := hpa.Spec.Metrics[0].External
	g.Expect(ext.Metric.Name).To(Equal("retryops_consumerpipeline_due_lag"))
	g.Expect(ext.Metric.Selector.MatchLabels).To(Equal(map[string]string{"consumerpipeline": p.Name}))
	g.Expect(ext.Target.Type).To(Equal(autoscalingv2.AverageValueMetricType))
	g.Expect(ext.Target.AverageValue.Value()).To(Equal(int64(250)))
	g.Expect(*hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds).To(Equal(int32(90)))

	g.Eventually(func() (*retryv1alpha1.PipelineAutoscalingStatus, error) {
		_, err := getter(p)()
		return p.Status.Autoscaling, err
	}, wait, poll).Should(And(Not(BeNil()), WithTransform(func(a *retryv1alpha1.PipelineAutoscalingStatus) retryv1alpha1.PipelineAutoscalingStatus { return *a },
		And(HaveField("Kind", retryv1alpha1.AutoscalerHPA), HaveField("Name", hpa.Name), HaveField("MinReplicas", int32(1)), HaveField("MaxReplicas", int32(2)),
			HaveField("Partitions", ptr.To[int32](2)), HaveField("State", retryv1alpha1.AutoscalingActive),
			HaveField("Message", ContainSubstring("maxReplicas 10 lowered to 2, the partition count"))))))

	// The HPA writes spec.replicas through the scale subresource; the Deployment follows, the HPA is
	// not written back.
	scaleTo(t, p, 2)
	d := deploymentOf(p)
	g.Eventually(func() (*int32, error) {
		_, err := getter(d)()
		return d.Spec.Replicas, err
	}, wait, poll).Should(Equal(ptr.To[int32](2)))

	// What keeps the HPA from scaling shows in status.autoscaling (here: no external metrics API).
	g.Eventually(func() error {
		if _, err := getter(hpa)(); err != nil {
			return err
		}
		hpa.Status.Conditions = []autoscalingv2.HorizontalPodAutoscalerCondition{{Type: autoscalingv2.ScalingActive, Status: "False",
			Reason: "FailedGetExternalMetric", Message: "the HPA was unable to compute the replica count", LastTransitionTime: metav1.Now()}}
		return env.Client.Status().Update(ctx, hpa)
	}, wait, poll).Should(Succeed())
	g.Eventually(func() (string, error) {
		_, err := getter(p)()
		if p.Status.Autoscaling == nil {
			return "", err
		}
		return p.Status.Autoscaling.Message, err
	}, wait, poll).Should(ContainSubstring("the HorizontalPodAutoscaler cannot scale (ScalingActive FailedGetExternalMetric: the HPA was unable to compute the replica count)"))

	g.Eventually(func() error {
		if _, err := getter(p)(); err != nil {
			return err
		}
		p.Spec.Autoscaling = nil
		return env.Client.Update(ctx, p)
	}, wait, poll).Should(Succeed())
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(hpa), &autoscalingv2.HorizontalPodAutoscaler{})
		return apierrors.IsNotFound(err)
	}, wait, poll).Should(BeTrue(), "the HPA goes with spec.autoscaling")
	g.Eventually(func() (*retryv1alpha1.PipelineAutoscalingStatus, error) {
		_, err := getter(p)()
		return p.Status.Autoscaling, err
	}, wait, poll).Should(BeNil())
}

// minReplicas above maxReplicas is refused by the API server with a clear message.
func TestPipelineAutoscalingBoundsAreValidated(t *testing.T) {
	g := NewWithT(t)
	ns, _ := pipelineFixture(t)
	p := newPipeline(ns, "bounds", ns+".orders", "policy", "dlq")
	p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](5), MaxReplicas: 2}
	err := env.Client.Create(context.Background(), p)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("autoscaling.minReplicas must not exceed autoscaling.maxReplicas"))
	p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 2, WakeLead: &metav1.Duration{Duration: time.Hour}}
	err = env.Client.Create(context.Background(), p)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("autoscaling.wakeLead must be between 1s and 10m"))
}
