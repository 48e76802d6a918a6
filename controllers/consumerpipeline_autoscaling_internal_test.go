package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
)

var autoscalingNow = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

// idlePipeline is a pipeline with minReplicas 0 whose status says it idles since an hour.
func idlePipeline() *retryv1alpha1.ConsumerPipeline {
	return &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders", UID: "uid-orders"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{Source: retryv1alpha1.PipelineSource{Topic: "orders"},
			Autoscaling: &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3}},
		Status: retryv1alpha1.ConsumerPipelineStatus{DueLag: ptr.To[int64](0), Autoscaling: &retryv1alpha1.PipelineAutoscalingStatus{
			Kind: retryv1alpha1.AutoscalerHPA, Name: "orders-dispatcher", State: retryv1alpha1.AutoscalingIdle,
			LastActiveTime: &metav1.Time{Time: autoscalingNow.Add(-time.Hour)}}},
	}
}

func autoscalingReconciler(c client.Client) *ConsumerPipelineReconciler {
	r := &ConsumerPipelineReconciler{Autoscaler: AutoscalerHPA}
	r.Kafka = &kafkaAccess{}
	r.Client, r.Recorder, r.Clock = c, events.NewFakeRecorder(10), clocktesting.NewFakePassiveClock(autoscalingNow)
	return r
}

// A failure to apply the autoscaler (an admission webhook refusing it, the API server down) must
// not end the children steps before the Deployment's: an idle pipeline with records due still
// wakes, and the failure is a transient problem, retried with backoff.
func TestAutoscalerFailureDoesNotKeepAnIdlePipelineAsleep(t *testing.T) {
	g := NewWithT(t)
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "autoscaling", Resource: "horizontalpodautoscalers"}, "orders-dispatcher", errors.New("denied by a webhook"))
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error { return refused },
		Apply: func(context.Context, client.WithWatch, runtime.ApplyConfiguration, ...client.ApplyOption) error {
			return refused
		},
	}).Build()
	r := autoscalingReconciler(c)
	p := idlePipeline()
	live := pipelineLive{lagRead: true, dueLag: ptr.To[int64](40)}
	var ps problems

	st, _ := r.reconcileAutoscaling(context.Background(), p, nil, pipelineTopics{sourcePartitions: 2}, live, p.Status.Autoscaling.DeepCopy(), &ps)
	g.Expect(r.renderInputs(p, pipelineRefs{}, nil, nil, st).Idle).To(BeFalse(), "40 records are due: the consumers start again")
	g.Expect(ps.transient()).To(MatchError(ContainSubstring("denied by a webhook")))
}

// Removing spec.autoscaling from an idle pipeline brings its Deployment back to spec.replicas even
// while its autoscaler cannot be deleted yet.
func TestRemovedAutoscalingWakesAnIdlePipelineWhateverTheAutoscalerDeletion(t *testing.T) {
	g := NewWithT(t)
	p := idlePipeline()
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: render.AutoscalerName(p),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: retryv1alpha1.GroupVersion.String(), Kind: "ConsumerPipeline", Name: p.Name, UID: p.UID, Controller: ptr.To(true)}}}}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(hpa).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(context.Context, client.WithWatch, client.Object, ...client.DeleteOption) error {
			return apierrors.NewServiceUnavailable("etcd is down")
		},
	}).Build()
	r := autoscalingReconciler(c)
	p.Spec.Autoscaling = nil
	var ps problems

	st, _ := r.reconcileAutoscaling(context.Background(), p, nil, pipelineTopics{}, pipelineLive{}, p.Status.Autoscaling.DeepCopy(), &ps)
	g.Expect(r.renderInputs(p, pipelineRefs{}, nil, nil, st).Idle).To(BeFalse(), "without spec.autoscaling the Deployment runs spec.replicas")
	g.Expect(ps.transient()).To(MatchError(ContainSubstring("etcd is down")))
	g.Expect(st).NotTo(BeNil(), "status keeps which autoscaler is left to delete")
}

// When the reconcile could not read the pipeline's figures (a topic step met a problem, the offsets
// read failed), the due lag in status is stale: it must neither put the pipeline to sleep nor keep
// it asleep, or source records would pile up with no consumer for as long as the problem lasts.
func TestStaleFiguresNeitherIdleNorKeepIdleAPipeline(t *testing.T) {
	g := NewWithT(t)
	r := autoscalingReconciler(fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build())
	for _, wasIdle := range []bool{false, true} {
		p := idlePipeline()
		p.Status.Autoscaling.State = retryv1alpha1.AutoscalingActive
		if wasIdle {
			p.Status.Autoscaling.State = retryv1alpha1.AutoscalingIdle
		}
		st := p.Status.Autoscaling.DeepCopy()
		r.decideIdle(context.Background(), p, st, render.AutoscalingOf(p, 2), pipelineLive{})
		g.Expect(st.IsIdle()).To(BeFalse(), "was idle: %t; the figures were not read", wasIdle)
	}
}
