package controllers

import (
	"context"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
)

// Condition reasons of the children (DeploymentReady, AlertsReady) that only this controller uses.
const (
	// reasonRulesApplied: the alert rules are in place (AlertsReady True).
	reasonRulesApplied = "RulesApplied"
	// reasonWaitingForReferences: the RetryPolicy or DeadLetterQueue is missing or invalid, so the
	// children cannot be rendered; existing ones are left as they are.
	reasonWaitingForReferences = "WaitingForReferences"
	// reasonWaitingForTopics: the Deployment is first created once the topics are ready.
	reasonWaitingForTopics = "WaitingForTopics"
)

// reconcileChildren applies the pipeline's children (dispatcher ConfigMap, consumer Deployment,
// alert rules) after the topic steps, even when those met a problem: the children depend on the spec,
// the policy and the queue, not on Kafka, so a broker outage never holds back a spec change. The
// Deployment is first created only once the topics are ready, so that consumers never start without
// their retry tiers (an auto-creating broker would make them with its defaults). Each step records its
// problems on DeploymentReady or AlertsReady and goes on.
func (r *ConsumerPipelineReconciler) reconcileChildren(ctx context.Context, s *pipelineScope) error {
	if err := runSteps(ctx, s, []step[*pipelineScope]{
		{"Access", r.reconcileAccess},
		{"Identity", r.reconcileIdentity},
		{"ConfigMap", r.reconcileConfigMap},
		{"Autoscaling", r.reconcileAutoscaling},
		{"Deployment", r.reconcileDeployment},
		{"Circuit", r.readCircuit},
	}, &s.deploymentProblems); err != nil {
		return err
	}
	return runSteps(ctx, s, []step[*pipelineScope]{{"Alerts", r.reconcileAlerts}}, &s.alertProblems)
}

// renderInputs are the inputs of internal/render for s, which must have its policy and queue.
func (r *ConsumerPipelineReconciler) renderInputs(s *pipelineScope) *render.Inputs {
	in := &render.Inputs{
		Pipeline:                s.p,
		Policy:                  s.policy,
		DLQ:                     s.queue,
		Tiers:                   s.tiers,
		Draining:                s.draining,
		DefaultBootstrapServers: r.Kafka.Defaults.BootstrapServers,
		Default:                 s.defaultConn,
		DispatcherImage:         r.DispatcherImage,
		RuleLabels:              r.RuleLabels,
		RunbookBaseURL:          r.RunbookBaseURL,
		CircuitReportInterval:   r.CircuitReportInterval,
		Idle:                    s.autoscaling.IsIdle(),
	}
	if r.Policies != nil {
		// Compiled when the policy was read (readPolicy): a cache hit, not a compile.
		if c, err := r.Policies.Compile(s.policy); err == nil {
			in.Compiled = c
		}
	}
	return in
}

// waitingForReferences is the problem of children that cannot be rendered.
func waitingForReferences() *problem {
	return &problem{Reason: reasonWaitingForReferences, Kind: problemWaiting, Progress: true,
		Message: "the RetryPolicy or the DeadLetterQueue is missing or invalid (see TopicsReady); what exists is left as it is"}
}

// reconcileConfigMap applies the dispatcher ConfigMap and keeps its hash for the Deployment.
func (r *ConsumerPipelineReconciler) reconcileConfigMap(ctx context.Context, s *pipelineScope) error {
	if s.live.withheld {
		return nil // the claim is refused: no config for consumers that must not run (stopConsumers)
	}
	if s.policy == nil || s.queue == nil {
		s.deploymentProblems.add(waitingForReferences())
		return nil
	}
	if s.identityMissing {
		return nil // the Identity step recorded why
	}
	if !s.drainingKnown {
		s.draining = r.keptDraining(ctx, s)
	}
	cm, err := render.ConfigMap(r.renderInputs(s))
	if err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	live := apply.Cached(ctx, r.Client, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	_, applied, err := apply.Owned(ctx, r.Client, s.p, cm, live)
	if err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Applied ConfigMap", "consumerPipeline", klog.KObj(s.p), "configMap", cm.Name)
	}
	s.configHash = render.ConfigHash(cm)
	return nil
}

// reconcileDeployment applies the consumer Deployment (see reconcileChildren for when it is first
// created) and keeps it, as the API server has it, for the status.
func (r *ConsumerPipelineReconciler) reconcileDeployment(ctx context.Context, s *pipelineScope) error {
	key := client.ObjectKey{Namespace: s.p.Namespace, Name: render.DeploymentName(s.p)}
	cur := &appsv1.Deployment{}
	live := apply.Cached(ctx, r.Client, key, cur)
	if live != nil && metav1.IsControlledBy(cur, s.p) {
		s.deployment = cur
	}
	if s.claimRefused != nil {
		return r.stopConsumers(ctx, s, cur)
	}
	if s.configHash == "" {
		// The ConfigMap step recorded why.
		return nil
	}
	// Rendered first, so that a spec error shows before the topics are ready.
	if err := r.checkTemplate(ctx, s.p); err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	d, err := render.Deployment(r.renderInputs(s), s.configHash)
	if err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	if live == nil && len(s.topicProblems) > 0 {
		s.deploymentProblems.add(&problem{Reason: reasonWaitingForTopics, Kind: problemWaiting, Progress: true,
			Message: "the Deployment is created once the topics are ready, so that consumers never start without their retry topics"})
		return nil
	}
	if live != nil && s.autoscaling != nil && ptr.Deref(cur.Spec.Replicas, 1) != ptr.Deref(d.Spec.Replicas, 1) {
		s.autoscaling.LastScaleTime = &metav1.Time{Time: r.Clock.Now().Truncate(time.Second)}
	}
	if s.autoscaling != nil && s.autoscaling.LastScaleTime != nil && r.Clock.Now().Sub(s.autoscaling.LastScaleTime.Time) < scalingGrace {
		s.scaling = true
	}
	got, applied, err := apply.Owned(ctx, r.Client, s.p, d, live)
	if err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	if !applied {
		return nil
	}
	ctrl.LoggerFrom(ctx).Info("Applied Deployment", "consumerPipeline", klog.KObj(s.p), "deployment", d.Name)
	s.deployment = &appsv1.Deployment{}
	return apply.Decode(got, s.deployment)
}

// reconcileAlerts applies the pipeline's alert rules.
func (r *ConsumerPipelineReconciler) reconcileAlerts(ctx context.Context, s *pipelineScope) error {
	if s.policy == nil || s.queue == nil {
		s.alertProblems.add(waitingForReferences())
		return nil
	}
	in := r.renderInputs(s)
	set, err := render.PipelineRuleSet(in)
	msg := ""
	if err == nil {
		msg, err = r.Rules.Apply(ctx, r.Client, s.p, set)
	}
	if err != nil {
		return recordProblem(&s.alertProblems, childProblem(err))
	}
	s.alertsMessage = msg
	return nil
}

// recordChildSpecErrors emits a Warning event for a child condition that became InvalidSpec, unless
// the event about Ready (ready, when it changed) already says the same.
func (r *ConsumerPipelineReconciler) recordChildSpecErrors(p *retryv1alpha1.ConsumerPipeline, before, after []metav1.Condition, ready *metav1.Condition) {
	for _, t := range []string{retryv1alpha1.ConditionAlertsReady, retryv1alpha1.ConditionDeploymentReady} {
		c, changed := conditionChanged(before, after, t)
		if !changed || c == nil || c.Reason != retryv1alpha1.ReasonInvalidSpec {
			continue
		}
		if ready != nil && strings.HasPrefix(ready.Message, t+": ") {
			continue
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, retryv1alpha1.ReasonInvalidSpec, "Reconcile", "%s: %s", t, c.Message)
	}
}
