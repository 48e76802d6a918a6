package render_test

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/promcheck"
	"github.com/retryops/retry-operator/internal/render"
)

const kedaPrometheus = "http://prometheus-operated.monitoring.svc:9090"

// autoscaledChat is the chat pipeline with spec.autoscaling (scale to zero, a cap above the
// partition count the test gives).
func autoscaledChat(t *testing.T) *retryv1alpha1.ConsumerPipeline {
	p := sinkURIInputs(t).Pipeline
	p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{
		MinReplicas: ptr.To[int32](0), MaxReplicas: 10, TargetDueLagPerReplica: ptr.To[int64](500),
		ScaleDownStabilization: pdur(2 * time.Minute),
	}
	return p
}

func TestGoldenScaledObject(t *testing.T) {
	p := autoscaledChat(t)
	got := documents(t, render.ScaledObject(p, render.AutoscalingOf(p, 3), kedaPrometheus).Object)
	assertGolden(t, "scaledobject-chat.yaml", got)
}

// TestScaledObjectAndHPAAgree checks the ScaledObject field by field against the
// HorizontalPodAutoscaler of the same pipeline: one target, the same bounds, threshold and
// scale-down window, whichever path the cluster takes.
func TestScaledObjectAndHPAAgree(t *testing.T) {
	for _, tc := range []struct {
		name       string
		spec       *retryv1alpha1.PipelineAutoscaling
		partitions int32
		min, max   int64
		target     string
		window     int64
	}{
		{"the defaults", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4}, 0, 1, 4, "1000", 300},
		{"scale to zero: KEDA gets 1, the operator does the rest", &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3}, 6, 1, 3, "1000", 300},
		{"capped at the partition count", &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](2), MaxReplicas: 12, TargetDueLagPerReplica: ptr.To[int64](250)}, 8, 2, 8, "250", 300},
		{"min above the cap", &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](5), MaxReplicas: 9, ScaleDownStabilization: &metav1.Duration{}}, 2, 2, 2, "1000", 0},
		{"a long window is bounded", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 2, ScaleDownStabilization: pdur(3 * time.Hour)}, 0, 1, 2, "1000", 3600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := sinkURIInputs(t).Pipeline
			p.Spec.Autoscaling = tc.spec
			a := render.AutoscalingOf(p, tc.partitions)
			so := render.ScaledObject(p, a, kedaPrometheus)
			hpa := render.HorizontalPodAutoscaler(p, a)

			g.Expect(so.GetAPIVersion()).To(Equal("keda.sh/v1alpha1"))
			g.Expect(so.GetKind()).To(Equal("ScaledObject"))
			g.Expect(so.GetName()).To(Equal(hpa.Name))
			g.Expect(so.GetName()).To(Equal(render.DeploymentName(p)))
			g.Expect(so.GetNamespace()).To(Equal(p.Namespace))
			g.Expect(so.GetLabels()).To(Equal(hpa.Labels))
			g.Expect(so.GetOwnerReferences()).To(BeEmpty(), "apply.Owned adds it")

			spec := so.Object["spec"].(map[string]any)
			g.Expect(spec["scaleTargetRef"]).To(Equal(map[string]any{
				"apiVersion": hpa.Spec.ScaleTargetRef.APIVersion, "kind": hpa.Spec.ScaleTargetRef.Kind, "name": hpa.Spec.ScaleTargetRef.Name,
			}))
			g.Expect(spec["scaleTargetRef"]).To(HaveKeyWithValue("apiVersion", "retry.retryops.dev/v1alpha1"))
			g.Expect(spec["minReplicaCount"]).To(Equal(tc.min))
			g.Expect(spec["maxReplicaCount"]).To(Equal(tc.max))
			g.Expect(int64(*hpa.Spec.MinReplicas)).To(Equal(tc.min))
			g.Expect(int64(hpa.Spec.MaxReplicas)).To(Equal(tc.max))
			g.Expect(spec["pollingInterval"]).To(Equal(int64(10)))
			g.Expect(spec["cooldownPeriod"]).To(Equal(tc.window))
			g.Expect(spec["advanced"]).To(Equal(map[string]any{"horizontalPodAutoscalerConfig": map[string]any{
				"name":     hpa.Name,
				"behavior": map[string]any{"scaleDown": map[string]any{"stabilizationWindowSeconds": tc.window}},
			}}))
			g.Expect(int64(*hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds)).To(Equal(tc.window))

			g.Expect(spec["triggers"]).To(HaveLen(1))
			trigger := spec["triggers"].([]any)[0].(map[string]any)
			g.Expect(trigger).To(Equal(map[string]any{
				"type": "prometheus", "name": "due-lag", "metricType": "AverageValue",
				"metadata": map[string]any{
					"serverAddress":    kedaPrometheus,
					"query":            `max(retryops_consumerpipeline_due_lag{namespace="shop",consumerpipeline="chat"})`,
					"threshold":        tc.target,
					"ignoreNullValues": "false",
				},
			}))
			g.Expect(strconv.FormatInt(hpa.Spec.Metrics[0].External.Target.AverageValue.Value(), 10)).To(Equal(tc.target))
			g.Expect(string(hpa.Spec.Metrics[0].External.Target.Type)).To(Equal(trigger["metricType"]))

			// The unstructured object deep-copies (only JSON types in it) and survives a YAML round trip.
			data, err := yaml.Marshal(so.DeepCopy().Object)
			g.Expect(err).NotTo(HaveOccurred())
			back := &unstructured.Unstructured{}
			g.Expect(yaml.Unmarshal(data, &back.Object)).To(Succeed())
			g.Expect(back.Object["spec"]).To(HaveKeyWithValue("maxReplicaCount", BeNumerically("==", tc.max)))
		})
	}
}

// TestScaledObjectNamesFitALabelValue: KEDA's webhook refuses a ScaledObject or HPA name over 63
// characters; a long pipeline name is hashed, so two long names stay apart.
func TestScaledObjectNamesFitALabelValue(t *testing.T) {
	g := NewWithT(t)
	names := map[string]bool{}
	for _, n := range []string{
		"chat",
		strings.Repeat("a", 52),
		strings.Repeat("a", 53),
		strings.Repeat("a", 60) + "-one",
		strings.Repeat("a", 60) + "-two",
		strings.Repeat("b", 253),
	} {
		p := autoscaledChat(t)
		p.Name = n
		so := render.ScaledObject(p, render.AutoscalingOf(p, 0), kedaPrometheus)
		g.Expect(len(so.GetName())).To(BeNumerically("<=", 63), n)
		g.Expect(so.GetName()).To(HaveSuffix("-dispatcher"))
		g.Expect(names).NotTo(HaveKey(so.GetName()), "two pipelines, one autoscaler name")
		names[so.GetName()] = true
		if len(n) <= 52 {
			g.Expect(so.GetName()).To(Equal(render.DeploymentName(p)))
		}
		hpaName := so.Object["spec"].(map[string]any)["advanced"].(map[string]any)["horizontalPodAutoscalerConfig"].(map[string]any)["name"]
		g.Expect(hpaName).To(Equal(so.GetName()))
		// The query names the pipeline in full: the gauge's label is the whole name.
		g.Expect(render.DueLagQuery(p.Namespace, p.Name)).To(ContainSubstring(`consumerpipeline="` + n + `"`))
	}
}

// TestDueLagQuerySelectsOnlyItsPipeline checks the trigger's query as the alert rules are checked:
// it names only a metric the operator exports, by labels that metric has, scoped to one pipeline;
// and promtool evaluates it over series of several pipelines to the pipeline's own value (values
// quoted as PromQL strings).
func TestDueLagQuerySelectsOnlyItsPipeline(t *testing.T) {
	g := NewWithT(t)
	query := render.DueLagQuery("shop", "chat")
	g.Expect(promcheck.MetricNames(query)).To(Equal([]string{opmetrics.ConsumerPipelineDueLag}))
	g.Expect(opmetrics.Exported(opmetrics.ConsumerPipelineDueLag)).To(BeTrue())
	sels := promcheck.Selectors(query)
	g.Expect(sels).To(HaveLen(1))
	labels, ok := promcheck.LabelsOf(sels[0].Metric)
	g.Expect(ok).To(BeTrue())
	used := slices.Sorted(slices.Values(sels[0].Labels))
	g.Expect(used).To(Equal([]string{opmetrics.LabelConsumerPipeline, opmetrics.LabelNamespace}))
	g.Expect(labels).To(ContainElements(used))

	odd := `we"ird\name`
	type sample struct {
		Labels string  `json:"labels"`
		Value  float64 `json:"value"`
	}
	type exprTest struct {
		Expr       string   `json:"expr"`
		EvalTime   string   `json:"eval_time"`
		ExpSamples []sample `json:"exp_samples"`
	}
	file := map[string]any{
		"rule_files":          []string{},
		"evaluation_interval": "1m",
		"tests": []map[string]any{{
			"interval": "1m",
			"input_series": []promSeries{
				{Series: `retryops_consumerpipeline_due_lag{namespace="shop",consumerpipeline="chat",instance="a"}`, Values: "7 7 7"},
				{Series: `retryops_consumerpipeline_due_lag{namespace="shop",consumerpipeline="chat",instance="b"}`, Values: "4 4 4"},
				{Series: `retryops_consumerpipeline_due_lag{namespace="other",consumerpipeline="chat"}`, Values: "900 900 900"},
				{Series: `retryops_consumerpipeline_due_lag{namespace="shop",consumerpipeline="chat2"}`, Values: "800 800 800"},
				{Series: `retryops_consumerpipeline_due_lag{namespace="shop",consumerpipeline="we\"ird\\name"}`, Values: "3 3 3"},
				{Series: `retryops_consumerpipeline_consumer_lag{namespace="shop",consumerpipeline="chat"}`, Values: "700 700 700"},
			},
			"promql_expr_test": []exprTest{
				{Expr: query, EvalTime: "2m", ExpSamples: []sample{{Labels: "{}", Value: 7}}},
				{Expr: render.DueLagQuery("shop", odd), EvalTime: "2m", ExpSamples: []sample{{Labels: "{}", Value: 3}}},
				{Expr: render.DueLagQuery("shop", "absent"), EvalTime: "2m", ExpSamples: []sample{}},
			},
		}},
	}
	data, err := yaml.Marshal(file)
	g.Expect(err).NotTo(HaveOccurred())
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "query.yaml"), data, 0o644)).To(Succeed())
	g.Expect(runPromtool(t, dir, "test", "rules", "query.yaml")).To(Succeed())

	// The same file with the query of another namespace fails: promtool really compares.
	file["tests"].([]map[string]any)[0]["promql_expr_test"] = []exprTest{{Expr: render.DueLagQuery("other", "chat"), EvalTime: "2m", ExpSamples: []sample{{Labels: "{}", Value: 7}}}}
	data, err = yaml.Marshal(file)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(filepath.Join(dir, "query.yaml"), data, 0o644)).To(Succeed())
	g.Expect(runPromtool(t, dir, "test", "rules", "query.yaml")).To(MatchError(ContainSubstring("FAILED")))
}
