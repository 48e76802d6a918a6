package envtestutil_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
)

// TestHPAControllerScalesAPipelineOnAnExternalMetric proves that controller-manager's horizontal
// pod autoscaler works on the local stack as the operator's autoscaling needs it: the HPA the
// operator renders (internal/render) scales a ConsumerPipeline through its scale subresource, on
// the external metric retryops_consumerpipeline_due_lag of that pipeline read through the
// aggregator, to ceil(value / target) within its bounds, and back down. The metric comes from a
// stub aggregated server; the test plays the operator, copying spec.replicas into status.replicas.
func TestHPAControllerScalesAPipelineOnAnExternalMetric(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	env, err := envtestutil.StartAggregated()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()

	const ns = "default"
	metrics := &stubExternalMetrics{namespace: ns, metric: render.ExternalMetricDueLag}
	stopMetrics, err := serveExternalMetrics(ctx, env, metrics)
	g.Expect(err).NotTo(HaveOccurred())
	defer stopMetrics()
	g.Eventually(func() (bool, error) { return apiServiceAvailable(ctx, env.Client) }, 60*time.Second, 200*time.Millisecond).
		Should(BeTrue(), "the stub's APIService is not Available")

	cm, err := env.StartControllerManager()
	g.Expect(err).NotTo(HaveOccurred())
	defer cm.Stop()

	p := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Name: "orders", Namespace: ns},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: "orders"},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: "policy"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "dlq"},
			Sink:               &retryv1alpha1.Sink{URI: "http://sink.example:8080/"},
			Replicas:           ptr.To[int32](1),
			Autoscaling: &retryv1alpha1.PipelineAutoscaling{
				MinReplicas: ptr.To[int32](1), MaxReplicas: 5, TargetDueLagPerReplica: ptr.To[int64](1000),
				ScaleDownStabilization: &metav1.Duration{Duration: 0},
			},
		},
	}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	setStatusReplicas(ctx, g, env.Client, p, 1)
	// The selector of the metric's value, as the operator labels it; a value under other labels
	// must not count.
	metrics.set(3500, render.ExternalMetricLabels(p.Name))

	hpa := render.HorizontalPodAutoscaler(p, render.AutoscalingOf(p, 0))
	g.Expect(hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds).To(HaveValue(BeZero()))
	g.Expect(env.Client.Create(ctx, hpa)).To(Succeed())

	specReplicas := func() (int32, error) {
		got := &retryv1alpha1.ConsumerPipeline{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return 0, err
		}
		return ptr.Deref(got.Spec.Replicas, -1), nil
	}
	const wait, poll = 60 * time.Second, 100 * time.Millisecond
	// 3500 due, 1000 per replica: ceil(3.5) = 4.
	g.Eventually(specReplicas, wait, poll).Should(Equal(int32(4)), "see %s", cm.LogPath)
	setStatusReplicas(ctx, g, env.Client, p, 4)

	// 9500 asks for 10: maxReplicas is 5.
	metrics.set(9500, render.ExternalMetricLabels(p.Name))
	g.Eventually(specReplicas, wait, poll).Should(Equal(int32(5)), "see %s", cm.LogPath)
	setStatusReplicas(ctx, g, env.Client, p, 5)

	// Consumed: 1500 asks for 2, at once (no stabilization window).
	metrics.set(1500, render.ExternalMetricLabels(p.Name))
	g.Eventually(specReplicas, wait, poll).Should(Equal(int32(2)), "see %s", cm.LogPath)
	setStatusReplicas(ctx, g, env.Client, p, 2)

	// Only another pipeline's value: the HPA gets nothing for this one and leaves it as it is.
	metrics.set(50_000, render.ExternalMetricLabels("other"))
	g.Consistently(specReplicas, 3*envtestutil.HPASyncPeriod, poll).Should(Equal(int32(2)), "see %s", cm.LogPath)

	// Nothing due: minReplicas is 1.
	metrics.set(0, render.ExternalMetricLabels(p.Name))
	g.Eventually(specReplicas, wait, poll).Should(Equal(int32(1)), "see %s", cm.LogPath)
}

// setStatusReplicas does the operator's part: status.replicas and status.selector, through the
// status subresource.
func setStatusReplicas(ctx context.Context, g Gomega, c client.Client, p *retryv1alpha1.ConsumerPipeline, replicas int32) {
	g.Eventually(func() error {
		got := &retryv1alpha1.ConsumerPipeline{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return err
		}
		patch := client.MergeFrom(got.DeepCopy())
		got.Status.Replicas = replicas
		got.Status.Selector = "app.kubernetes.io/instance=" + p.Name
		return c.Status().Patch(ctx, got, patch)
	}).Should(Succeed())
}
