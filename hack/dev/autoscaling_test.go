package main

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// TestDemoHasAnAutoscaledPipeline: the demo's bursts pipeline, as `make dev` applies it (every field
// known to the API types), may scale to zero, scales on its own source with as many partitions as
// pods, and delivers to the bursts sink.
func TestDemoHasAnAutoscaledPipeline(t *testing.T) {
	objs := renderDemo(t)
	u := objs["ConsumerPipeline/bursts"]
	if u == nil {
		t.Fatal("no ConsumerPipeline bursts in the demo")
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	p := &retryv1alpha1.ConsumerPipeline{}
	if err := yaml.UnmarshalStrict(raw, p); err != nil {
		t.Fatalf("the bursts pipeline does not decode strictly: %v", err)
	}
	a := p.Spec.Autoscaling
	switch {
	case a == nil:
		t.Fatal("bursts has no spec.autoscaling")
	case ptr.Deref(a.MinReplicas, 1) != 0:
		t.Errorf("minReplicas %d, want 0 (the demo shows scaling to zero)", ptr.Deref(a.MinReplicas, 1))
	case p.Spec.Source.Create == nil || p.Spec.Source.Create.Partitions < a.MaxReplicas:
		t.Errorf("the source's partitions %+v are fewer than maxReplicas %d: the cap would hide the scaling", p.Spec.Source.Create, a.MaxReplicas)
	case burstsSize/ptr.Deref(a.TargetDueLagPerReplica, 1000) < int64(a.MaxReplicas):
		t.Errorf("a burst of %d asks for fewer than %d pods", burstsSize, a.MaxReplicas)
	case p.Spec.Replicas != nil:
		t.Errorf("spec.replicas %d is set: the autoscaler owns it", *p.Spec.Replicas)
	}
	if p.Spec.Source.Topic != burstsTopic || p.Spec.Sink == nil || p.Spec.Sink.URI != "http://127.0.0.1:1/bursts" {
		t.Errorf("source %q, sink %+v", p.Spec.Source.Topic, p.Spec.Sink)
	}
	if objs["RetryPolicy/bursts"] == nil {
		t.Error("no RetryPolicy bursts in the demo")
	}
}

// TestAutoscalingLine: the live view's line for an autoscaled pipeline says the pods it runs and
// wants, its due lag, its autoscaler and, when idle, when it wakes.
func TestAutoscalingLine(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	pipeline := func(mut func(p *retryv1alpha1.ConsumerPipeline)) *retryv1alpha1.ConsumerPipeline {
		p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Name: "bursts"}}
		p.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 8, TargetDueLagPerReplica: ptr.To[int64](500)}
		p.Spec.Replicas = ptr.To[int32](3)
		p.Status.Replicas = 2
		p.Status.DueLag = ptr.To[int64](1234)
		p.Status.Autoscaling = &retryv1alpha1.PipelineAutoscalingStatus{Kind: retryv1alpha1.AutoscalerHPA, Name: "bursts-dispatcher", MinReplicas: 1, MaxReplicas: 4, Partitions: ptr.To[int32](4)}
		if mut != nil {
			mut(p)
		}
		return p
	}
	cases := []struct {
		name string
		p    *retryv1alpha1.ConsumerPipeline
		want string
	}{
		{"scaling", pipeline(nil),
			"autoscaling bursts: 2 pods of 3 wanted, due lag 1234 (500 per pod), HorizontalPodAutoscaler bursts-dispatcher 1..4 (capped at 4 partitions), may scale to 0"},
		{"idle until a retry is due", pipeline(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Status.Replicas, p.Status.DueLag = 0, ptr.To[int64](0)
			p.Status.Autoscaling.State, p.Status.Autoscaling.WakeTime = retryv1alpha1.AutoscalingIdle, &metav1.Time{Time: now.Add(25 * time.Second)}
		}), "autoscaling bursts: 0 pods (idle: nothing due; wakes at 12:00:25, in 25s, before a waiting retry is due), due lag 0 (500 per pod), HorizontalPodAutoscaler bursts-dispatcher 1..4 (capped at 4 partitions), may scale to 0"},
		{"idle until records arrive", pipeline(func(p *retryv1alpha1.ConsumerPipeline) {
			p.Status.Replicas, p.Status.DueLag, p.Status.Autoscaling.State = 0, ptr.To[int64](0), retryv1alpha1.AutoscalingIdle
			p.Status.Autoscaling.Partitions = nil
		}), "autoscaling bursts: 0 pods (idle: nothing due; wakes when records arrive), due lag 0 (500 per pod), HorizontalPodAutoscaler bursts-dispatcher 1..4, may scale to 0"},
		{"no autoscaler yet", pipeline(func(p *retryv1alpha1.ConsumerPipeline) { p.Status.Autoscaling, p.Status.DueLag = nil, nil }),
			"autoscaling bursts: 2 pods, no autoscaler yet, due lag unknown"},
		{"not autoscaled", pipeline(func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Autoscaling = nil }), ""},
	}
	for _, c := range cases {
		if got := autoscalingLine(c.p, now); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}
