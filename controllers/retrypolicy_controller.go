package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// RetryPolicyReconciler validates RetryPolicies, computes their retry plan and writes it, with the
// pipelines that use each policy, into status.
type RetryPolicyReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
	// Metrics are the operator's gauges; nil exports nothing.
	Metrics *opmetrics.Metrics
}

// Reconcile rebuilds one policy's status from its spec and the cluster and patches it when it changed.
func (r *RetryPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	p := &v1.RetryPolicy{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) && r.Metrics != nil {
			r.Metrics.DeleteRetryPolicy(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pipelines := &v1.ConsumerPipelineList{}
	if err := r.List(ctx, pipelines, client.InNamespace(p.Namespace), client.MatchingFields{indexPipelineByPolicy: p.Name}); err != nil {
		return ctrl.Result{}, err
	}

	st := policyStatus(p, pipelines.Items)
	if equality.Semantic.DeepEqual(st, p.Status) {
		r.export(p, st)
		return ctrl.Result{}, nil
	}
	before := meta.FindStatusCondition(p.Status.Conditions, v1.ConditionReady)
	after := meta.FindStatusCondition(st.Conditions, v1.ConditionReady)

	patch := client.MergeFrom(p.DeepCopy())
	p.Status = st
	if err := r.Status().Patch(ctx, p, patch); err != nil {
		return ctrl.Result{}, err
	}
	r.export(p, st)
	if readyChanged(before, after) {
		if after.Status == metav1.ConditionTrue {
			log.Info("Policy is valid", "retryPolicy", klog.KObj(p), "schedule", st.ScheduleSummary)
			r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, after.Reason, "Validate", "Retry plan computed: %s", st.ScheduleSummary)
		} else {
			log.Info("Policy is invalid", "retryPolicy", klog.KObj(p), "reason", after.Reason, "message", after.Message)
			r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, after.Reason, "Validate", "%s", after.Message)
		}
	}
	return ctrl.Result{}, nil
}

// export sets the policy's gauge to the dead letters its status shows.
func (r *RetryPolicyReconciler) export(p *v1.RetryPolicy, st v1.RetryPolicyStatus) {
	if r.Metrics != nil && st.DeadLetterMessages != nil {
		r.Metrics.SetRetryPolicy(p.Namespace, p.Name, *st.DeadLetterMessages)
	}
}

// readyChanged tells whether the Ready condition changed (status, reason or message): each such
// change is worth an event.
func readyChanged(before, after *metav1.Condition) bool {
	if after == nil {
		return false
	}
	return before == nil || before.Status != after.Status || before.Reason != after.Reason || before.Message != after.Message
}

// SetupWithManager registers the controller: it watches RetryPolicies and the ConsumerPipelines that
// reference them, so usage counts follow pipelines appearing, changing and going away.
func (r *RetryPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1.RetryPolicy{}).
		Watches(&v1.ConsumerPipeline{}, handler.EnqueueRequestsFromMapFunc(pipelineToPolicy)).
		Named("retrypolicy").
		Complete(r)
}

// pipelineToPolicy maps a pipeline to the policy it references. An update that changes the reference
// enqueues both policies: controller-runtime calls the map function for the old and the new object.
func pipelineToPolicy(_ context.Context, o client.Object) []reconcile.Request {
	p := o.(*v1.ConsumerPipeline)
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.RetryPolicyRef.Name}}}
}
