package render_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

func TestAutoscalingOfAppliesDefaultsAndThePartitionCap(t *testing.T) {
	g := NewWithT(t)
	p := sinkURIInputs(t).Pipeline
	g.Expect(render.AutoscalingOf(p, 3)).To(BeNil(), "no spec.autoscaling")

	p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 10}
	a := render.AutoscalingOf(p, 3)
	g.Expect(*a).To(Equal(render.Autoscaling{Name: render.DeploymentName(p), Min: 1, Max: 3, Capped: true, Partitions: 3,
		Target: 1000, ScaleDownStabilization: 5 * time.Minute, WakeLead: 30 * time.Second}))
	g.Expect(a.CapMessage(p)).To(Equal("maxReplicas 10 lowered to 3, the partition count of the pipeline's largest topic: more pods would have nothing to read"))
	g.Expect(render.AutoscalingOf(p, 0).Max).To(Equal(int32(10)), "partitions unknown: no cap")

	p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 2, TargetDueLagPerReplica: ptr.To[int64](50),
		ScaleDownStabilization: &metav1.Duration{Duration: 0}, WakeLead: &metav1.Duration{Duration: 5 * time.Second}}
	a = render.AutoscalingOf(p, 8)
	g.Expect(*a).To(Equal(render.Autoscaling{Name: render.DeploymentName(p), Min: 1, Max: 2, ScaleToZero: true, Partitions: 8,
		Target: 50, WakeLead: 5 * time.Second}), "the autoscaler keeps 1 at least: zero is the operator's")
	g.Expect(a.CapMessage(p)).To(BeEmpty())
}

func TestAnIdlePipelinesDeploymentRunsNoPod(t *testing.T) {
	g := NewWithT(t)
	in := sinkURIInputs(t)
	in.Pipeline.Spec.Replicas = ptr.To[int32](3)
	d, err := render.Deployment(in, "hash")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*d.Spec.Replicas).To(Equal(int32(3)))
	in.Idle = true
	d, err = render.Deployment(in, "hash")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(*d.Spec.Replicas).To(BeZero())
}

// A pipeline that may scale to zero has no consumer while idle: DispatcherDown then needs records due.
func TestDispatcherDownOfAPipelineThatMayScaleToZero(t *testing.T) {
	g := NewWithT(t)
	expr := func(in *render.Inputs) string {
		f, err := render.AlertRules(in)
		g.Expect(err).NotTo(HaveOccurred())
		for _, r := range f.Groups[0].Rules {
			if r.Alert == render.AlertDispatcherDown {
				return r.Expr
			}
		}
		return ""
	}
	in := sinkURIInputs(t)
	g.Expect(expr(in)).NotTo(ContainSubstring("due_lag"))
	in.Pipeline.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 3}
	g.Expect(expr(in)).NotTo(ContainSubstring("due_lag"), "minReplicas 1: a pod always runs")
	in.Pipeline.Spec.Autoscaling.MinReplicas = ptr.To[int32](0)
	e := expr(in)
	g.Expect(strings.HasSuffix(e, ` and on() max by (namespace, consumerpipeline) (retryops_consumerpipeline_due_lag{namespace="`+in.Pipeline.Namespace+
		`",consumerpipeline="`+in.Pipeline.Name+`"}) > 0`)).To(BeTrue(), e)
}

func TestHorizontalPodAutoscalerOfAPipelineWithALongName(t *testing.T) {
	g := NewWithT(t)
	p := sinkURIInputs(t).Pipeline
	p.Name = strings.Repeat("a", 100)
	p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4}
	h := render.HorizontalPodAutoscaler(p, render.AutoscalingOf(p, 0))
	v := h.Spec.Metrics[0].External.Metric.Selector.MatchLabels["consumerpipeline"]
	g.Expect(len(v)).To(BeNumerically("<=", 63), "a valid label value")
	g.Expect(render.ExternalMetricLabels(p.Name)).To(Equal(map[string]string{"consumerpipeline": v,
		"consumerpipeline-sha256": "2816597888e4a0d3a36b82b83316ab32"}), "the shortened label and the whole name's hash")
	g.Expect(h.Spec.Metrics[0].External.Metric.Selector.MatchExpressions).To(BeEmpty())
	p.Name = "orders"
	h = render.HorizontalPodAutoscaler(p, render.AutoscalingOf(p, 0))
	g.Expect(h.Spec.Metrics[0].External.Metric.Selector.MatchLabels).To(Equal(map[string]string{"consumerpipeline": "orders"}))
	g.Expect(h.Spec.Metrics[0].External.Metric.Selector.MatchExpressions).To(Equal([]metav1.LabelSelectorRequirement{
		{Key: "consumerpipeline-sha256", Operator: metav1.LabelSelectorOpDoesNotExist}}), "a name that fits: no hash label")
	g.Expect(h.Spec.ScaleTargetRef.Name).To(Equal(p.Name))
}

// An autoscaler changes spec.replicas all day: the rules of an autoscaled pipeline must not follow
// it, or each scale would rewrite its PrometheusRule and alert ConfigMap.
func TestAlertRulesOfAnAutoscaledPipelineDoNotChangeWhenItScales(t *testing.T) {
	g := NewWithT(t)
	in := sinkURIInputs(t)
	in.Pipeline.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 8}
	rules := func(replicas int32) render.RuleFile {
		in.Pipeline.Spec.Replicas = ptr.To(replicas)
		f, err := render.AlertRules(in)
		g.Expect(err).NotTo(HaveOccurred())
		return f
	}
	g.Expect(rules(5)).To(Equal(rules(2)))
}
