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
	"github.com/retryops/retry-operator/sdk/circuitstate"
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

// pipelineChildren is what the children phase applied and read.
type pipelineChildren struct {
	// draining are the unused tiers the applied dispatcher config drains: the topics phase's, or,
	// when it could not tell, those keptDraining keeps.
	draining []string
	// deployment is the consumer Deployment as the API server has it; nil when there is none, or
	// when it is not the pipeline's.
	deployment *appsv1.Deployment
	// scaling is set when the operator changed the Deployment's replicas for the autoscaler less
	// than scalingGrace ago (setPipelineDeploymentScaling).
	scaling bool
	// autoscaling is status.autoscaling (consumerpipeline_autoscaling.go); wakeAfter, when not zero,
	// is when an idle pipeline must be looked at again to wake.
	autoscaling *retryv1alpha1.PipelineAutoscalingStatus
	wakeAfter   time.Duration
	// circuit is the fold of the consumers' circuit reports; nil when they were not read.
	circuit *circuitstate.Summary
	// alertsMessage says as what the alert rules were applied.
	alertsMessage string
	// deploymentProblems and alertProblems are the problems of DeploymentReady and AlertsReady.
	deploymentProblems, alertProblems problems
}

// childrenFromStatus is what the status shows of the children when the phase does not run.
func childrenFromStatus(p *retryv1alpha1.ConsumerPipeline, t pipelineTopics) pipelineChildren {
	return pipelineChildren{draining: t.draining, autoscaling: p.Status.Autoscaling.DeepCopy()}
}

// children is the last phase: it applies the pipeline's children (the consumers' access, the
// dispatcher ConfigMap, the autoscaler, the consumer Deployment, the alert rules) and reads the
// consumers' circuit reports, whatever problems the earlier phases met: the children depend on the
// spec, the policy and the queue, not on Kafka, so a broker outage never holds back a spec change.
// The Deployment is first created only once the topics are ready, so that consumers never start
// without their retry tiers (an auto-creating broker would make them with its defaults). Each step
// records its problems on DeploymentReady or AlertsReady and goes on; another error ends the phase.
func (r *ConsumerPipelineReconciler) children(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, run pipelineRun) (pipelineChildren, error) {
	kids := childrenFromStatus(p, run.topics)
	ps := &kids.deploymentProblems
	refused := run.refused()
	if stop, err := endStep(ps, named("Access", r.reconcileAccess(ctx, p, ps))); stop {
		return kids, err
	}
	dc, identityMissing, err := r.reconcileIdentity(ctx, p, run.refs.queue, refused, ps)
	if stop, err := endStep(ps, named("Identity", err)); stop {
		return kids, err
	}
	hash := ""
	if refused == nil { // no config for consumers that must not run (stopConsumers)
		in := r.renderInputs(p, run.refs, kids.draining, dc, kids.autoscaling)
		hash, kids.draining, err = r.reconcileConfigMap(ctx, p, run, in, identityMissing, ps)
		if stop, err := endStep(ps, named("ConfigMap", err)); stop {
			return kids, err
		}
	}
	kids.autoscaling, kids.wakeAfter = r.reconcileAutoscaling(ctx, p, refused, run.topics, run.live, kids.autoscaling, ps)
	deploy := deploymentInputs{refused: refused, configHash: hash, topicsReady: len(run.problems) == 0,
		render: r.renderInputs(p, run.refs, kids.draining, dc, kids.autoscaling)}
	kids.deployment, kids.scaling, err = r.reconcileDeployment(ctx, p, deploy, kids.autoscaling, ps)
	if stop, err := endStep(ps, named("Deployment", err)); stop {
		return kids, err
	}
	kids.circuit = r.readCircuit(ctx, p)
	kids.alertsMessage, err = r.reconcileAlerts(ctx, p, run.refs, r.renderInputs(p, run.refs, kids.draining, dc, kids.autoscaling), &kids.alertProblems)
	_, err = endStep(&kids.alertProblems, named("Alerts", err))
	return kids, err
}

// renderInputs are the inputs of internal/render for p: its references (policy and queue must be
// there to render), the draining tiers, how its pods reach the default connection (dc) and its
// autoscaling status.
func (r *ConsumerPipelineReconciler) renderInputs(p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, draining []string, dc *render.DefaultConnection, autoscaling *retryv1alpha1.PipelineAutoscalingStatus) *render.Inputs {
	in := &render.Inputs{
		Pipeline:                p,
		Policy:                  refs.policy,
		DLQ:                     refs.queue,
		Tiers:                   refs.tiers,
		Draining:                draining,
		DefaultBootstrapServers: r.Kafka.Defaults.BootstrapServers,
		Default:                 dc,
		DispatcherImage:         r.DispatcherImage,
		RuleLabels:              r.RuleLabels,
		RunbookBaseURL:          r.RunbookBaseURL,
		CircuitReportInterval:   r.CircuitReportInterval,
		Idle:                    autoscaling.IsIdle(),
	}
	if r.Policies != nil && refs.policy != nil {
		// Compiled when the policy was read (readPolicy): a cache hit, not a compile.
		if c, err := r.Policies.Compile(refs.policy); err == nil {
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

// reconcileConfigMap applies the dispatcher ConfigMap rendered from in, and returns its hash for the
// Deployment ("" when none was applied) and the draining tiers it lists: in's, or, when the topics
// phase could not tell, those keptDraining keeps. Nothing is applied while the namespace lacks the
// consumer identity its pods need (identityMissing: the Identity step recorded why).
func (r *ConsumerPipelineReconciler) reconcileConfigMap(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, run pipelineRun, in *render.Inputs, identityMissing bool, ps *problems) (hash string, draining []string, err error) {
	draining = in.Draining
	if in.Policy == nil || in.DLQ == nil {
		ps.add(waitingForReferences())
		return "", draining, nil
	}
	if identityMissing {
		return "", draining, nil
	}
	if !run.topics.drainingKnown {
		draining = r.keptDraining(ctx, p, run.refs, run.topics.owned, run.claim.blocked)
		in.Draining = draining
	}
	cm, err := render.ConfigMap(in)
	if err != nil {
		return "", draining, recordProblem(ps, childProblem(err))
	}
	live := apply.Cached(ctx, r.Client, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{})
	_, applied, err := apply.Owned(ctx, r.Client, r.Applied, p, cm, live)
	if err != nil {
		return "", draining, recordProblem(ps, childProblem(err))
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Applied ConfigMap", "consumerPipeline", klog.KObj(p), "configMap", cm.Name)
	}
	return render.ConfigHash(cm), draining, nil
}

// deploymentInputs are what the Deployment step renders from.
type deploymentInputs struct {
	// refused is why the pipeline may not run (pipelineClaim.refused): its consumers are stopped.
	refused *problem
	// configHash is the hash of the applied dispatcher ConfigMap; "" when none was applied (the
	// ConfigMap step, or the Identity step, recorded why).
	configHash string
	// topicsReady is set when the earlier phases met no problem.
	topicsReady bool
	render      *render.Inputs
}

// reconcileDeployment applies the consumer Deployment (see children for when it is first created)
// and returns it as the API server has it, and whether it is being scaled for the autoscaler
// (autoscaling, whose lastScaleTime it updates).
func (r *ConsumerPipelineReconciler) reconcileDeployment(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, in deploymentInputs, autoscaling *retryv1alpha1.PipelineAutoscalingStatus, ps *problems) (*appsv1.Deployment, bool, error) {
	key := client.ObjectKey{Namespace: p.Namespace, Name: render.DeploymentName(p)}
	cur := &appsv1.Deployment{}
	live := apply.Cached(ctx, r.Client, key, cur)
	var have *appsv1.Deployment
	if live != nil && metav1.IsControlledBy(cur, p) {
		have = cur
	}
	if in.refused != nil {
		return have, false, r.stopConsumers(ctx, p, in.refused, have, ps)
	}
	if in.configHash == "" {
		return have, false, nil
	}
	// Rendered first, so that a spec error shows before the topics are ready.
	if err := r.checkTemplate(ctx, p); err != nil {
		return have, false, recordProblem(ps, childProblem(err))
	}
	d, err := render.Deployment(in.render, in.configHash)
	if err != nil {
		return have, false, recordProblem(ps, childProblem(err))
	}
	if live == nil && !in.topicsReady {
		ps.add(&problem{Reason: reasonWaitingForTopics, Kind: problemWaiting, Progress: true,
			Message: "the Deployment is created once the topics are ready, so that consumers never start without their retry topics"})
		return have, false, nil
	}
	if live != nil && autoscaling != nil && ptr.Deref(cur.Spec.Replicas, 1) != ptr.Deref(d.Spec.Replicas, 1) {
		autoscaling.LastScaleTime = &metav1.Time{Time: r.Clock.Now().Truncate(time.Second)}
	}
	scaling := autoscaling != nil && autoscaling.LastScaleTime != nil && r.Clock.Now().Sub(autoscaling.LastScaleTime.Time) < scalingGrace
	got, applied, err := apply.Owned(ctx, r.Client, r.Applied, p, d, live)
	if err != nil {
		return have, scaling, recordProblem(ps, childProblem(err))
	}
	if !applied {
		return have, scaling, nil
	}
	ctrl.LoggerFrom(ctx).Info("Applied Deployment", "consumerPipeline", klog.KObj(p), "deployment", d.Name)
	have = &appsv1.Deployment{}
	return have, scaling, apply.Decode(got, have)
}

// reconcileAlerts applies the pipeline's alert rules rendered from in, and says as what.
func (r *ConsumerPipelineReconciler) reconcileAlerts(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, in *render.Inputs, ps *problems) (string, error) {
	if refs.policy == nil || refs.queue == nil {
		ps.add(waitingForReferences())
		return "", nil
	}
	set, err := render.PipelineRuleSet(in)
	msg := ""
	if err == nil {
		msg, err = r.Rules.Apply(ctx, r.Client, r.Applied, p, set)
	}
	if err != nil {
		return "", recordProblem(ps, childProblem(err))
	}
	return msg, nil
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
