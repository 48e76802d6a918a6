package controllers

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// eventConsumersStopped is the event of a consumer Deployment scaled to zero because its
// pipeline's claim is refused, or its consumer group or retry tiers are another pipeline's
// (consumerpipeline_fanout.go).
const eventConsumersStopped = "ConsumersStopped"

// checkReadClaims is the ReadClaims step: under the manager's claim policy, the source topic a
// pipeline reads and the consumer group it joins are claims like the topics it makes. Its consumers
// would read the source with the operator's credentials (or the pipeline's own) and deliver it to
// the pipeline's sink, and join the group, taking its partitions and committing its offsets; its
// status would show the topic's lag. A refused claim (a user error naming the rule) ends the topic
// steps: Kafka is not asked about the topic or the group, the figures of the topic are withheld
// from status, the batched reads drop this pipeline's topics and group, and the Deployment step
// creates no consumers and scales existing ones to zero (stopConsumers).
func (r *ConsumerPipelineReconciler) checkReadClaims(_ context.Context, s *pipelineScope) error {
	t := r.Kafka.Defaults.Tenancy
	p := &problem{Reason: retryv1alpha1.ReasonTopicClaimRefused, Kind: problemUser}
	err := t.CheckSourceClaim(s.p.Namespace, string(s.p.Spec.Source.Topic))
	if err == nil {
		p.Reason = retryv1alpha1.ReasonConsumerGroupClaimRefused
		err = t.CheckGroupClaim(s.p.Namespace, consumerGroup(s.p))
	}
	if err == nil {
		return nil
	}
	p.Message = err.Error()
	return r.refuse(s, p)
}

// stopConsumers is the Deployment step of a pipeline whose claim is refused: no consumer
// Deployment is created, and one that exists (made before the claim policy, or before it changed)
// is scaled to zero with a merge patch of its replicas alone, which needs nothing rendered (the
// policy or the queue may be missing too). The template is left as it was; the next apply of an
// allowed pipeline sets the replicas back.
func (r *ConsumerPipelineReconciler) stopConsumers(ctx context.Context, s *pipelineScope, cur *appsv1.Deployment) error {
	refused := s.claimRefused
	if s.deployment == nil {
		s.deploymentProblems.add(&problem{Reason: refused.Reason, Kind: problemUser,
			Message: "no consumer Deployment is created while the pipeline's claim is refused or in conflict (see TopicsReady)"})
		return nil
	}
	if ptr.Deref(cur.Spec.Replicas, 1) != 0 {
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Replicas = ptr.To(int32(0))
		if err := r.Patch(ctx, cur, patch); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Scaled consumers to zero", "consumerPipeline", klog.KObj(s.p), "deployment", cur.Name, "reason", refused.Reason)
		r.Recorder.Eventf(s.p, nil, corev1.EventTypeWarning, eventConsumersStopped, "Reconcile",
			"Deployment %s scaled to 0 replicas: %s", cur.Name, refused.Message)
	}
	s.deploymentProblems.add(&problem{Reason: refused.Reason, Kind: problemUser, Message: fmt.Sprintf(
		"Deployment %s is scaled to 0 replicas while the pipeline's claim is refused or in conflict (see TopicsReady)", cur.Name)})
	return nil
}
