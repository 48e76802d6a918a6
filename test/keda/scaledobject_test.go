package keda_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/render"
)

// pipeline is a ConsumerPipeline named name in ns with spec.autoscaling a.
func pipeline(ns, name string, a *retryv1alpha1.PipelineAutoscaling) *retryv1alpha1.ConsumerPipeline {
	return &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: "alice_tasks", Create: &retryv1alpha1.TopicCreation{Partitions: 3}},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: "chatbot"},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "chatbot-dlq"},
			Sink:               &retryv1alpha1.Sink{URI: "http://orchestrator.default.svc:8080/tasks"},
			Replicas:           ptr.To[int32](2),
			Autoscaling:        a,
		},
	}
}

// scaledObjectCases are pipelines whose ScaledObjects must pass.
var scaledObjectCases = []struct {
	name       string
	p          *retryv1alpha1.ConsumerPipeline
	partitions int32
	address    string
}{
	{"the defaults", pipeline("shop", "chat", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4}), 0, controllers.DefaultKEDAPrometheusAddress},
	{"scale to zero", pipeline("shop", "orders", &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3, WakeLead: &metav1.Duration{Duration: time.Minute}}), 6, controllers.DefaultKEDAPrometheusAddress},
	{"capped below minReplicas, no stabilization", pipeline("shop", "audit", &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](5), MaxReplicas: 9, ScaleDownStabilization: &metav1.Duration{}}), 2, controllers.DefaultKEDAPrometheusAddress},
	{"the longest name", pipeline("shop", strings.Repeat("n", 240)+".long-name", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 2}), 0, controllers.DefaultKEDAPrometheusAddress},
	{"a namespace with dashes", pipeline("team-a-payments", "payments-eu-west", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 30, TargetDueLagPerReplica: ptr.To[int64](20000), ScaleDownStabilization: &metav1.Duration{Duration: time.Hour}}), 12, controllers.DefaultKEDAPrometheusAddress},
	{"a custom Prometheus address", pipeline("team-a-payments", "refunds", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 2}), 1, "https://thanos-query.observability.svc:10902/prometheus"},
}

// TestScaledObjectsPassAServerSideDryRun creates the ScaledObjects of several pipelines with a
// server-side dry run against the pinned release's CRDs, and checks them as KEDA's webhook would.
func TestScaledObjectsPassAServerSideDryRun(t *testing.T) {
	env := sharedEnv(t)
	ctx := context.Background()
	for _, tc := range scaledObjectCases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			so := render.ScaledObject(tc.p, render.AutoscalingOf(tc.p, tc.partitions), tc.address)
			g.Expect(so.GroupVersionKind()).To(Equal(render.ScaledObjectGVK))
			g.Expect(dryRun(ctx, env.Client, so)).To(Succeed())
			g.Expect(kedaWebhookRefuses(ctx, env.Client, so)).To(Succeed())
			tr, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
			g.Expect(tr[0]).To(HaveKeyWithValue("metadata", HaveKeyWithValue("serverAddress", tc.address)))
		})
	}
}

// TestTheDryRunAndTheWebhookChecksCanFail changes a rendered ScaledObject in ways the release's CRD
// or KEDA's webhook refuses: the checks above are not vacuous.
func TestTheDryRunAndTheWebhookChecksCanFail(t *testing.T) {
	env := sharedEnv(t)
	ctx := context.Background()
	p := pipeline("shop", "chat", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4})
	good := render.ScaledObject(p, render.AutoscalingOf(p, 0), controllers.DefaultKEDAPrometheusAddress)
	NewWithT(t).Expect(dryRun(ctx, env.Client, good)).To(Succeed(), "the unchanged object")

	for name, change := range map[string]func(u *unstructured.Unstructured){
		"min above max (the CRD's CEL rule)": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(5), "spec", "minReplicaCount")
		},
		"no trigger": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(u.Object, []any{}, "spec", "triggers")
		},
		"no scale target": func(u *unstructured.Unstructured) { unstructured.RemoveNestedField(u.Object, "spec", "scaleTargetRef") },
		"a count as a string": func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, "10", "spec", "pollingInterval")
		},
		"an unknown auth kind": func(u *unstructured.Unstructured) {
			setTrigger(u, "authenticationRef", map[string]any{"name": "x", "kind": "Secret"})
		},
	} {
		t.Run("dry run: "+name, func(t *testing.T) {
			u := good.DeepCopy()
			change(u)
			NewWithT(t).Expect(dryRun(ctx, env.Client, u)).To(HaveOccurred())
		})
	}

	t.Run("webhook: a name over 63 characters", func(t *testing.T) {
		g := NewWithT(t)
		u := good.DeepCopy()
		u.SetName(strings.Repeat("x", 64))
		g.Expect(dryRun(ctx, env.Client, u)).To(Succeed(), "the CRD allows it: only KEDA's webhook refuses it")
		g.Expect(kedaWebhookRefuses(ctx, env.Client, u)).To(MatchError(ContainSubstring("must be no more than 63")))
	})
	t.Run("webhook: two triggers of one name", func(t *testing.T) {
		u := good.DeepCopy()
		tr, _, _ := unstructured.NestedSlice(u.Object, "spec", "triggers")
		_ = unstructured.SetNestedSlice(u.Object, append(tr, runtime.DeepCopyJSONValue(tr[0])), "spec", "triggers")
		NewWithT(t).Expect(kedaWebhookRefuses(ctx, env.Client, u)).To(MatchError(ContainSubstring("defined multiple times")))
	})

	// The operator's own HPA (the path without KEDA) still scaling the pipeline: KEDA refuses the
	// ScaledObject until that HPA is gone, so a switch of path deletes the HPA first.
	t.Run("webhook: an HPA already scales the pipeline", func(t *testing.T) {
		g := NewWithT(t)
		other := pipeline("shop", "switching", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4})
		a := render.AutoscalingOf(other, 0)
		hpa := render.HorizontalPodAutoscaler(other, a)
		g.Expect(env.Client.Create(ctx, hpa)).To(Succeed())
		defer func() { g.Expect(env.Client.Delete(ctx, hpa)).To(Succeed()) }()
		so := render.ScaledObject(other, a, controllers.DefaultKEDAPrometheusAddress)
		g.Expect(kedaWebhookRefuses(ctx, env.Client, so)).To(MatchError(ContainSubstring("already managed by the hpa '" + hpa.Name + "'")))
		// The ScaledObject of another pipeline is not affected.
		g.Expect(kedaWebhookRefuses(ctx, env.Client, good)).To(Succeed())
	})
}

func setTrigger(u *unstructured.Unstructured, field string, v any) {
	tr, _, _ := unstructured.NestedSlice(u.Object, "spec", "triggers")
	tr[0].(map[string]any)[field] = v
	_ = unstructured.SetNestedSlice(u.Object, tr, "spec", "triggers")
}

// TestTheScaleTargetIsThePipelinesScaleSubresource resolves a ScaledObject's scaleTargetRef as
// KEDA does (API version and kind through the REST mapper) and reads the scale subresource of the
// pipeline it names.
func TestTheScaleTargetIsThePipelinesScaleSubresource(t *testing.T) {
	g := NewWithT(t)
	env := sharedEnv(t)
	ctx := context.Background()
	p := pipeline("team-a-payments", "scaled", &retryv1alpha1.PipelineAutoscaling{MaxReplicas: 4})
	g.Expect(env.Client.Create(ctx, p.DeepCopy())).To(Succeed())
	so := render.ScaledObject(p, render.AutoscalingOf(p, 0), controllers.DefaultKEDAPrometheusAddress)
	ref, _, _ := unstructured.NestedStringMap(so.Object, "spec", "scaleTargetRef")

	gv, err := schema.ParseGroupVersion(ref["apiVersion"])
	g.Expect(err).NotTo(HaveOccurred())
	mapping, err := env.Client.RESTMapper().RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref["kind"]}, gv.Version)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(mapping.Resource.Resource).To(Equal("consumerpipelines"))

	obj, err := env.Client.Scheme().New(mapping.GroupVersionKind)
	g.Expect(err).NotTo(HaveOccurred())
	target := obj.(client.Object)
	target.SetNamespace(so.GetNamespace())
	target.SetName(ref["name"])
	scale := &autoscalingv1.Scale{}
	g.Expect(env.Client.SubResource("scale").Get(ctx, target, scale)).To(Succeed())
	g.Expect(scale.Name).To(Equal(p.Name))
	g.Expect(scale.Spec.Replicas).To(Equal(*p.Spec.Replicas))
}

// TestTheREADMEShowsWhatTheOperatorMakes renders the ScaledObject of docs/autoscaling.md's example
// pipeline and compares it with the one that page shows, which must pass the dry run too.
func TestTheREADMEShowsWhatTheOperatorMakes(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(repoPath("docs/autoscaling.md"))
	g.Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile("(?s)\n## Autoscaling with KEDA\n.*?\n```yaml\n(.*?)\n```\n").FindSubmatch(data)
	g.Expect(m).NotTo(BeNil(), "docs/autoscaling.md has no section \"Autoscaling with KEDA\" with a YAML example")
	docs := decode(t, "docs/autoscaling.md", m[1])
	g.Expect(docs).To(HaveLen(2))
	g.Expect(docs[0].GetKind()).To(Equal("ConsumerPipeline"))
	g.Expect(docs[1].GroupVersionKind()).To(Equal(render.ScaledObjectGVK))

	p := &retryv1alpha1.ConsumerPipeline{}
	g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(docs[0].Object, p)).To(Succeed())
	g.Expect(p.Spec.Source.Create).NotTo(BeNil())
	address := regexp.MustCompile(`--keda-prometheus-address=(\S+)`).FindSubmatch(m[1])
	g.Expect(address).NotTo(BeNil(), "the example names the flag's value")
	want := render.ScaledObject(p, render.AutoscalingOf(p, p.Spec.Source.Create.Partitions), string(address[1]))
	wantJSON, err := want.MarshalJSON()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(docs[1].Object).To(Equal(decode(t, "render", wantJSON)[0].Object), "regenerate docs/autoscaling.md's example from internal/render/testdata/scaledobject-chat.yaml")

	env := sharedEnv(t)
	g.Expect(dryRun(context.Background(), env.Client, docs[1])).To(Succeed())
	g.Expect(kedaWebhookRefuses(context.Background(), env.Client, docs[1])).To(Succeed())
}
