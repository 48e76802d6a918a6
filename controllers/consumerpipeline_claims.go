package controllers

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// eventConsumersStopped is the event of a consumer Deployment scaled to zero because its
// pipeline's claim is refused, or its consumer group or retry tiers are another pipeline's
// (consumerpipeline_fanout.go).
const eventConsumersStopped = "ConsumersStopped"

// pipelineClaim is what the claims phase found: what the pipeline may run on and manage.
type pipelineClaim struct {
	// refused is why the pipeline may not run at all: the claim policy refuses the source it reads
	// or the group it joins, or an older pipeline has its group or tier base. Then no consumers run
	// (stopConsumers) and no figures of the source or the group are shown.
	refused *problem
	// owned are the topics the ledger records for the pipeline (created or adopted), sorted.
	owned []string
	// blocked are the topics a DeadLetterQueue claims: the pipeline leaves them alone.
	blocked map[string]bool
	// managesSource is set when spec.source.create asks to and no other pipeline on the source
	// manages it (findSourceOwner); sourceOwner names the pipeline that does, when one does.
	managesSource bool
	sourceOwner   string
}

// claims is the second phase. Under the manager's claim policy, the source topic a pipeline reads
// and the consumer group it joins are claims like the topics it makes: its consumers would read the
// source with the operator's credentials (or the pipeline's own) and deliver it to the pipeline's
// sink, and join the group, taking its partitions and committing its offsets. A refused claim (a
// user error naming the rule), or a group or tier base an older pipeline has (checkSharing), ends
// the phases: Kafka is not asked about the topics or the group, the batched reads drop the
// pipeline's topics and group, and no consumers run. Otherwise it finds out which topics the
// pipeline may manage: its own retry tiers, and its source when it asks to create it and no other
// pipeline on the source manages it; a topic a DeadLetterQueue claims never (blockedTopics).
func (r *ConsumerPipelineReconciler) claims(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, conn *pipelineConnection, ps *problems) (pipelineClaim, error) {
	claim := pipelineClaim{blocked: map[string]bool{}}
	if pr := r.readClaimRefusal(p); pr != nil {
		return r.refuse(p, claim, pr)
	}
	// Each check compares with a party of its own: a claimant whose brokers did not answer spares
	// the rest of its check a wait (kafkaspec.Party), not the other checks their answers.
	pr, err := r.checkSharing(ctx, p, r.selfParty(p, conn))
	if err != nil {
		return claim, named("Sharing", err)
	}
	if pr != nil {
		return r.refuse(p, claim, pr)
	}
	if claim.owned, err = r.ownedTopics(ctx, p); err != nil {
		return claim, named("Claims", err)
	}
	if claim.managesSource, claim.sourceOwner, err = r.findSourceOwner(ctx, p, claim.owned, r.selfParty(p, conn)); err != nil {
		return claim, named("Claims", err)
	}
	if claim.blocked, err = r.blockedTopics(ctx, p, refs, claim.owned, r.selfParty(p, conn), ps); err != nil {
		return claim, named("Claims", err)
	}
	return claim, nil
}

// readClaimRefusal is the problem of a source topic or consumer group the claim policy does not
// give the pipeline's namespace; nil when both are given.
func (r *ConsumerPipelineReconciler) readClaimRefusal(p *retryv1alpha1.ConsumerPipeline) *problem {
	t := r.Kafka.Defaults.Tenancy
	pr := &problem{Reason: retryv1alpha1.ReasonTopicClaimRefused, Kind: problemUser}
	err := t.CheckSourceClaim(p.Namespace, string(p.Spec.Source.Topic))
	if err == nil {
		pr.Reason = retryv1alpha1.ReasonConsumerGroupClaimRefused
		err = t.CheckGroupClaim(p.Namespace, consumerGroup(p))
	}
	if err == nil {
		return nil
	}
	pr.Message = err.Error()
	return pr
}

// refuse ends the phases with pr: the claim is refused, and the batched reads forget the
// pipeline's topics and group.
func (r *ConsumerPipelineReconciler) refuse(p *retryv1alpha1.ConsumerPipeline, claim pipelineClaim, pr *problem) (pipelineClaim, error) {
	pr.Message = truncate(pr.Message, maxConditionMessage)
	claim.refused = pr
	r.forgetFigures(client.ObjectKeyFromObject(p))
	return claim, pr
}

// forgetFigures drops the pipeline of key's topics and group from the batched reads.
func (r *ConsumerPipelineReconciler) forgetFigures(key types.NamespacedName) {
	owner := pipelineOwner(key)
	r.Kafka.Offsets.Forget(owner)
	r.Kafka.Commits.Forget(owner)
	r.Kafka.Due.Forget(owner)
}

// blockedTopics are the topics of the pipeline that a DeadLetterQueue claims, of those it may
// manage: the tiers it created (owned), those of the plan, and its source when it asks to create it.
// A tier of the plan or the source so claimed is a TopicConflict recorded in ps.
func (r *ConsumerPipelineReconciler) blockedTopics(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, owned []string, self *kafkaspec.Party, ps *problems) (map[string]bool, error) {
	source := string(p.Spec.Source.Topic)
	names := createdTiers(p, owned)
	for _, t := range refs.tiers {
		names = append(names, t.Name)
	}
	if p.Spec.Source.Create != nil {
		names = append(names, source)
	}
	slices.Sort(names)
	blocked := map[string]bool{}
	for _, name := range slices.Compact(names) {
		dlqs, err := r.queuesClaiming(ctx, self, name)
		if err != nil {
			return blocked, err
		}
		if len(dlqs) == 0 {
			continue
		}
		blocked[name] = true
		if refs.hasTier(name) || name == source {
			ps.add(&problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: fmt.Sprintf(
				"topic %q is the dead letter topic of DeadLetterQueue %s/%s; this pipeline leaves it alone",
				name, dlqs[0].Namespace, dlqs[0].Name)})
		}
	}
	return blocked, nil
}

// stopConsumers is the Deployment step of a pipeline whose claim is refused (refused): no consumer
// Deployment is created, and one that exists (cur, made before the claim policy, or before it
// changed) is scaled to zero with a merge patch of its replicas alone, which needs nothing rendered
// (the policy or the queue may be missing too). The template is left as it was; the next apply of
// an allowed pipeline sets the replicas back. Why is recorded in ps.
func (r *ConsumerPipelineReconciler) stopConsumers(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refused *problem, cur *appsv1.Deployment, ps *problems) error {
	if cur == nil {
		ps.add(&problem{Reason: refused.Reason, Kind: problemUser,
			Message: "no consumer Deployment is created while the pipeline's claim is refused or in conflict (see TopicsReady)"})
		return nil
	}
	if ptr.Deref(cur.Spec.Replicas, 1) != 0 {
		patch := client.MergeFrom(cur.DeepCopy())
		cur.Spec.Replicas = ptr.To(int32(0))
		if err := r.Patch(ctx, cur, patch); err != nil {
			return err
		}
		ctrl.LoggerFrom(ctx).Info("Scaled consumers to zero", "consumerPipeline", klog.KObj(p), "deployment", cur.Name, "reason", refused.Reason)
		r.Recorder.Eventf(p, nil, corev1.EventTypeWarning, eventConsumersStopped, "Reconcile",
			"Deployment %s scaled to 0 replicas: %s", cur.Name, refused.Message)
	}
	ps.add(&problem{Reason: refused.Reason, Kind: problemUser, Message: fmt.Sprintf(
		"Deployment %s is scaled to 0 replicas while the pipeline's claim is refused or in conflict (see TopicsReady)", cur.Name)})
	return nil
}
