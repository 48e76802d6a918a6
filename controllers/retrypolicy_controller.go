package controllers

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/policy"
)

// RetryPolicyReconciler validates RetryPolicies, computes their retry plan and writes it, with the
// pipelines that use each policy, into status.
type RetryPolicyReconciler struct {
	client.Client
	Recorder recorder.EventRecorder
	// Metrics are the operator's gauges; nil exports nothing.
	Metrics *opmetrics.Metrics
	// Policies compiles each policy once per generation; nil compiles every time.
	Policies *policy.Cache
}

// Reconcile rebuilds one policy's status from its spec and the cluster and patches it when it changed.
func (r *RetryPolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &retryv1alpha1.RetryPolicy{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		if apierrors.IsNotFound(err) && r.Metrics != nil {
			r.Metrics.DeleteRetryPolicy(req.Namespace, req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pipelines := &retryv1alpha1.ConsumerPipelineList{}
	if err := r.List(ctx, pipelines, client.InNamespace(p.Namespace), client.MatchingFields{indexPipelineByPolicy: p.Name}); err != nil {
		return ctrl.Result{}, err
	}

	st := policyStatus(p, pipelines.Items, r.Policies)
	_, _, err := policyStatusWriter.patch(ctx, r.Client, r.Recorder, p, func(p *retryv1alpha1.RetryPolicy) { p.Status = st }, nil,
		"Retry plan computed: "+st.ScheduleSummary, "schedule", st.ScheduleSummary)
	if err != nil {
		return staleOrError(err)
	}
	r.export(p, st)
	return ctrl.Result{}, nil
}

// policyStatusWriter writes a policy's status.
var policyStatusWriter = statusWriter[*retryv1alpha1.RetryPolicy]{
	conditions: func(p *retryv1alpha1.RetryPolicy) []metav1.Condition { return p.Status.Conditions },
	logKey:     "retryPolicy", ready: "Policy is valid", notReady: "Policy is invalid", action: "Validate",
	// A policy valid from its creation is no news (its status shows the plan); one valid again
	// after a Warning, or whose plan changed, is.
	quiet: firstReady,
}

// export sets the policy's gauge to the dead letters its status shows.
func (r *RetryPolicyReconciler) export(p *retryv1alpha1.RetryPolicy, st retryv1alpha1.RetryPolicyStatus) {
	if r.Metrics != nil && st.DeadLetterMessages != nil {
		r.Metrics.SetRetryPolicy(p.Namespace, p.Name, *st.DeadLetterMessages)
	}
}

// SetupWithManager registers the controller: it watches RetryPolicies and the ConsumerPipelines that
// reference them, so usage counts follow pipelines appearing, changing and going away.
func (r *RetryPolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&retryv1alpha1.RetryPolicy{}).
		Watches(&retryv1alpha1.ConsumerPipeline{}, handler.EnqueueRequestsFromMapFunc(pipelineToPolicy)).
		Named("retrypolicy").
		Complete(r)
}

// pipelineToPolicy maps a pipeline to the policy it references. An update that changes the reference
// enqueues both policies: controller-runtime calls the map function for the old and the new object.
func pipelineToPolicy(_ context.Context, o client.Object) []reconcile.Request {
	p := o.(*retryv1alpha1.ConsumerPipeline)
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: p.Namespace, Name: p.Spec.RetryPolicyRef.Name}}}
}
