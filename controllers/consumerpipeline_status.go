package controllers

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// pipelineConditions are the conditions Ready summarises, in order: Ready takes the first that is
// not True, and when all are, the reason of the last. The Deployment comes last because it is the
// last to become ready (it needs running pods), so a ready pipeline's reason is Available.
var pipelineConditions = []string{retryv1alpha1.ConditionTopicsReady, retryv1alpha1.ConditionAlertsReady, retryv1alpha1.ConditionCircuitClosed, retryv1alpha1.ConditionDeploymentReady}

// pipelineStatus rebuilds a pipeline's status from what the phases found (run) and did (kids);
// clusterID is the cluster ID read this reconcile ("" when none was: the previous one stays).
func pipelineStatus(p *retryv1alpha1.ConsumerPipeline, run pipelineRun, kids pipelineChildren, clusterID string) retryv1alpha1.ConsumerPipelineStatus {
	st := *p.Status.DeepCopy()
	st.ObservedGeneration = p.Generation
	st.ConsumerGroup = consumerGroup(p)
	if clusterID != "" {
		st.KafkaClusterID = clusterID
	}
	setPipelineTopics(&st, p, run.refs.deadLetter, run.topics, kids.draining)
	setPipelineFigures(&st, p.Status.Topics, run.live)
	setPipelineTopicsReady(&st, p.Generation, run.problems, pipelineTopicsMessage(st.Topics))
	setPipelineAlertsReady(&st, p.Generation, kids.alertProblems, kids.alertsMessage)
	setPipelineDeployment(&st, p.Generation, kids.deployment, kids.deploymentProblems)
	setPipelineDeploymentScaling(&st, p, kids)
	setPipelineDeploymentKafka(&st, p, kids)
	setPipelineCircuit(&st, p, run.refs.policy, kids.circuit)
	st.Autoscaling = kids.autoscaling
	setPipelineReady(&st, p.Generation)
	setPipelineStalled(&st, p.Generation, allProblems(run, kids))
	return st
}

// allProblems are the problems of every condition Ready summarises.
func allProblems(run pipelineRun, kids pipelineChildren) problems {
	all := append(problems{}, run.problems...)
	all = append(all, kids.alertProblems...)
	return append(all, kids.deploymentProblems...)
}

// setPipelineStalled sets Stalled: True on a user error of any step, or while the Deployment's
// rollout has passed its progress deadline (kstatus counts that as stalled for a Deployment too:
// the template needs a change, or the cluster room for it); removed otherwise.
func setPipelineStalled(st *retryv1alpha1.ConsumerPipelineStatus, generation int64, ps problems) {
	if c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionDeploymentReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == reasonProgressDeadlineExceeded {
		ps = append(slices.Clone(ps), &problem{Reason: c.Reason, Kind: problemUser, Message: c.Message})
	}
	setStalled(&st.Conditions, generation, ps)
}

// setPipelineTopics writes the topics: the source and its partitions, the retry tiers with their
// delays and partitions, the tiers no longer used and those of them draining, and the dead letter
// topic.
func setPipelineTopics(st *retryv1alpha1.ConsumerPipelineStatus, p *retryv1alpha1.ConsumerPipeline, deadLetter string, topics pipelineTopics, draining []string) {
	t := &retryv1alpha1.PipelineTopics{
		Source:           string(p.Spec.Source.Topic),
		SourcePartitions: topics.sourcePartitions,
		Retries:          topics.retries,
		UnusedRetries:    topics.unused,
		DrainingRetries:  draining,
		DeadLetter:       deadLetter,
	}
	if len(t.Retries) == 0 {
		t.Retries = nil
	}
	if len(t.UnusedRetries) == 0 {
		t.UnusedRetries = nil
	}
	if len(t.DrainingRetries) == 0 {
		t.DrainingRetries = nil
	}
	st.Topics = t
}

// setPipelineTopicsReady sets TopicsReady: True with reason TopicsReady when the topic steps met no
// problem, else False with the reason of the first problem and every problem's message.
func setPipelineTopicsReady(st *retryv1alpha1.ConsumerPipelineStatus, generation int64, ps problems, readyMessage string) {
	meta.SetStatusCondition(&st.Conditions, ps.condition(retryv1alpha1.ConditionTopicsReady, generation, retryv1alpha1.ReasonTopicsReady, readyMessage))
}

// setPipelineReady sets Ready from the conditions it summarises: False (or Unknown) like the first
// of them that is not True, with its reason and its message prefixed by its type; True when all are,
// with the reason of the last one and their messages.
func setPipelineReady(st *retryv1alpha1.ConsumerPipelineStatus, generation int64) {
	c := metav1.Condition{Type: retryv1alpha1.ConditionReady, ObservedGeneration: generation, Status: metav1.ConditionTrue}
	for _, t := range pipelineConditions {
		sub := meta.FindStatusCondition(st.Conditions, t)
		switch {
		case sub == nil || sub.ObservedGeneration != generation:
			c.Status, c.Reason, c.Message = metav1.ConditionUnknown, retryv1alpha1.ReasonReconciling, t+" not yet known"
		case sub.Status != metav1.ConditionTrue:
			c.Status, c.Reason, c.Message = sub.Status, sub.Reason, t+": "+sub.Message
		default:
			c.Reason = sub.Reason
			if c.Message != "" {
				c.Message += "; "
			}
			c.Message += sub.Message
			continue
		}
		break
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// pipelineTopicsMessage describes ready topics.
func pipelineTopicsMessage(t *retryv1alpha1.PipelineTopics) string {
	if t == nil {
		return ""
	}
	msg := fmt.Sprintf("source %s has %d partitions; %d retry topics", t.Source, t.SourcePartitions, len(t.Retries))
	if t.DeadLetter != "" {
		msg += "; dead letters go to " + t.DeadLetter
	}
	return msg
}

// Reasons of DeploymentReady read from the Deployment's status.
const (
	// reasonAvailable: every wanted pod runs the current template and is ready.
	reasonAvailable = "Available"
	// reasonProgressing: a rollout is under way (the Deployment controller has not seen the latest
	// spec yet, or pods of the current template are still being created, or old ones removed).
	reasonProgressing = "Progressing"
	// reasonUnavailable: the rollout is complete but fewer pods than wanted are ready.
	reasonUnavailable = "Unavailable"
	// reasonScaling: an autoscaled pipeline's pod count is changing; pods not ready yet are expected.
	reasonScaling = "Scaling"
	// reasonProgressDeadlineExceeded: the Deployment controller gave up waiting for the rollout
	// (spec.progressDeadlineSeconds).
	reasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
)

// setPipelineAlertsReady sets AlertsReady: True with reason RulesApplied when the rules were applied
// (the message says as what), else False with the reason of the first problem.
func setPipelineAlertsReady(st *retryv1alpha1.ConsumerPipelineStatus, generation int64, ps problems, readyMessage string) {
	meta.SetStatusCondition(&st.Conditions, ps.condition(retryv1alpha1.ConditionAlertsReady, generation, reasonRulesApplied, readyMessage))
}

// setPipelineDeployment writes the replicas, ready replicas and pod selector of the Deployment d
// (none when nil) and DeploymentReady: False with the first problem when applying it met one, else
// as deploymentReadyCondition says. status.replicas is the pods the Deployment runs, as a
// Deployment's own scale subresource reports it: an autoscaler reads it as the current scale.
func setPipelineDeployment(st *retryv1alpha1.ConsumerPipelineStatus, generation int64, d *appsv1.Deployment, ps problems) {
	st.Replicas, st.ReadyReplicas, st.Selector = 0, nil, ""
	if d != nil {
		st.Replicas = d.Status.Replicas
		st.ReadyReplicas = ptr.To(d.Status.ReadyReplicas)
		if sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil && d.Spec.Selector != nil {
			st.Selector = sel.String()
		}
	}
	c := deploymentReadyCondition(d, generation)
	if len(ps) > 0 {
		c = ps.condition(retryv1alpha1.ConditionDeploymentReady, generation, "", "")
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// deploymentReadyCondition is DeploymentReady as the Deployment's status tells it, with the checks of
// `kubectl rollout status`: True (Available) when the Deployment controller has seen the latest spec,
// every wanted pod runs the current template and is ready, and no old pod is left; otherwise False
// with reason ReplicaFailure (pods cannot be created, with the Deployment controller's message),
// ProgressDeadlineExceeded, Progressing or Unavailable.
func deploymentReadyCondition(d *appsv1.Deployment, generation int64) metav1.Condition {
	c := metav1.Condition{Type: retryv1alpha1.ConditionDeploymentReady, ObservedGeneration: generation, Status: metav1.ConditionFalse}
	if d == nil {
		c.Reason, c.Message = reasonProgressing, "the Deployment does not exist yet"
		return c
	}
	want := ptr.Deref(d.Spec.Replicas, 1)
	ds := d.Status
	for _, dc := range ds.Conditions {
		// The Deployment controller could not create pods (a Pod Security rejection, a quota): said
		// at once, not as a rollout in progress. Only for the spec it has seen: a newer one may fix it.
		if dc.Type == appsv1.DeploymentReplicaFailure && dc.Status == corev1.ConditionTrue && ds.ObservedGeneration >= d.Generation {
			c.Reason, c.Message = retryv1alpha1.ReasonReplicaFailure, fmt.Sprintf("Deployment %s cannot create pods: %s: %s", d.Name, dc.Reason, dc.Message)
			return c
		}
	}
	for _, dc := range ds.Conditions {
		if dc.Type == appsv1.DeploymentProgressing && dc.Status == corev1.ConditionFalse && dc.Reason == reasonProgressDeadlineExceeded {
			c.Reason, c.Message = reasonProgressDeadlineExceeded, fmt.Sprintf("Deployment %s: %s", d.Name, dc.Message)
			return c
		}
	}
	switch {
	case ds.ObservedGeneration < d.Generation:
		c.Reason, c.Message = reasonProgressing, fmt.Sprintf("Deployment %s: waiting for the Deployment controller to see generation %d", d.Name, d.Generation)
	case ds.UpdatedReplicas < want:
		c.Reason, c.Message = reasonProgressing, fmt.Sprintf("Deployment %s: %d of %d pods run the current template", d.Name, ds.UpdatedReplicas, want)
	case ds.Replicas > ds.UpdatedReplicas:
		c.Reason, c.Message = reasonProgressing, fmt.Sprintf("Deployment %s: %d old pods are being removed", d.Name, ds.Replicas-ds.UpdatedReplicas)
	case ds.ReadyReplicas < want:
		c.Reason, c.Message = reasonUnavailable, fmt.Sprintf("Deployment %s: %d of %d pods ready", d.Name, ds.ReadyReplicas, want)
	case want == 0:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, reasonAvailable, fmt.Sprintf("Deployment %s is scaled to 0 replicas", d.Name)
	case ds.ReadyReplicas > want:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, reasonAvailable, fmt.Sprintf("Deployment %s: %d pods ready, scaling down to %d", d.Name, ds.ReadyReplicas, want)
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, reasonAvailable, fmt.Sprintf("Deployment %s: %d of %d pods ready", d.Name, ds.ReadyReplicas, want)
	}
	return c
}

// scalingGrace is how long after the operator changed an autoscaled pipeline's replicas its pods
// not yet ready count as a scale in progress rather than a problem.
const scalingGrace = 3 * time.Minute

// setPipelineDeploymentScaling keeps DeploymentReady True, reason Scaling, while an autoscaled
// pipeline's Deployment is being scaled (kids.scaling) and only its pod count, not its template, is
// changing: a scale up or a wake from zero is normal progress, not a reason for Ready to go False
// with a Warning event. A rollout (old pods left), pods that cannot be created and a progress
// deadline passed are reported as always, and so are pods still not ready scalingGrace after.
func setPipelineDeploymentScaling(st *retryv1alpha1.ConsumerPipelineStatus, p *retryv1alpha1.ConsumerPipeline, kids pipelineChildren) {
	d := kids.deployment
	c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionDeploymentReady)
	if !kids.scaling || d == nil || c == nil || c.Status != metav1.ConditionFalse || len(kids.deploymentProblems) > 0 ||
		(c.Reason != reasonProgressing && c.Reason != reasonUnavailable) || d.Status.Replicas > d.Status.UpdatedReplicas {
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: retryv1alpha1.ConditionDeploymentReady, Status: metav1.ConditionTrue,
		ObservedGeneration: p.Generation, Reason: reasonScaling,
		Message: fmt.Sprintf("Deployment %s is scaling to %d pods, %d ready", d.Name, ptr.Deref(d.Spec.Replicas, 1), d.Status.ReadyReplicas)})
}
