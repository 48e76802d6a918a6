package controllers

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// pipelineRefs is what the references phase found out about the objects a pipeline names.
type pipelineRefs struct {
	// policy is the RetryPolicy, nil while it is missing or invalid; tiers are then unknown, and
	// nothing is created or removed until the plan is known again.
	policy *retryv1alpha1.RetryPolicy
	// tiers are the retry tiers of the policy's plan, named under the pipeline's tier base.
	tiers dispatchercfg.Tiers
	// queue is the DeadLetterQueue when dead letters may go to its topic (it exists, the claim policy
	// gives its topic to its namespace, and it manages that topic); nil otherwise.
	queue *retryv1alpha1.DeadLetterQueue
	// deadLetter is the queue's topic, for status.topics.deadLetter: "" when the queue is missing,
	// the previous status's value when the queue could not be read.
	deadLetter string
}

// planKnown says the tiers are known: the policy exists and is valid.
func (refs pipelineRefs) planKnown() bool { return refs.policy != nil }

// hasTier says name is one of the plan's tiers.
func (refs pipelineRefs) hasTier(name string) bool {
	for _, t := range refs.tiers {
		if t.Name == name {
			return true
		}
	}
	return false
}

// references is the first phase: it reads the RetryPolicy and the DeadLetterQueue. A missing or
// invalid one is a problem recorded in ps, not the end of the phases.
func (r *ConsumerPipelineReconciler) references(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, ps *problems) (pipelineRefs, error) {
	refs := pipelineRefs{}
	if t := p.Status.Topics; t != nil {
		refs.deadLetter = t.DeadLetter
	}
	policy, tiers, err := r.readPolicy(ctx, p, ps)
	if err != nil {
		return refs, named("RetryPolicy", err)
	}
	refs.policy, refs.tiers = policy, tiers
	queue, deadLetter, err := r.readDeadLetterQueue(ctx, p, ps)
	if err == nil || deadLetter != "" {
		refs.queue, refs.deadLetter = queue, deadLetter
	}
	if err != nil {
		return refs, named("DeadLetterQueue", err)
	}
	return refs, nil
}

// readPolicy reads the referenced RetryPolicy and computes its retry tiers. A missing or invalid
// policy is recorded in ps and returned as nil: the tiers in status are left as they were.
func (r *ConsumerPipelineReconciler) readPolicy(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, ps *problems) (*retryv1alpha1.RetryPolicy, dispatchercfg.Tiers, error) {
	name := p.Spec.RetryPolicyRef.Name
	rp := &retryv1alpha1.RetryPolicy{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, rp); err != nil {
		if apierrors.IsNotFound(err) {
			ps.add(&problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true,
				Message: fmt.Sprintf("RetryPolicy %q not found: the retry topics are left as they are until it exists", name)})
			return nil, nil, nil
		}
		return nil, nil, err
	}
	compiled, err := compilePolicy(r.Policies, rp)
	if err != nil {
		ps.add(&problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemWaiting,
			Message: truncate(fmt.Sprintf("RetryPolicy %q is invalid, the retry topics are left as they are: %v", name, err), maxConditionMessage)})
		return nil, nil, nil
	}
	naming := retryv1alpha1.NamingByAttempt
	if rt := p.Spec.RetryTopics; rt != nil && rt.Naming != "" {
		naming = rt.Naming
	}
	return rp, retryTiers(tierBase(p, r.Kafka.Defaults), naming, compiled.Plan()), nil
}

// readDeadLetterQueue reads the referenced queue and its topic (which the queue's own controller
// manages, on the queue's connection). It returns the queue only when dead letters may go to its
// topic, and the topic's name for the status ("" when the queue is missing); why not is recorded
// in ps.
func (r *ConsumerPipelineReconciler) readDeadLetterQueue(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, ps *problems) (*retryv1alpha1.DeadLetterQueue, string, error) {
	name := p.Spec.DeadLetterQueueRef.Name
	dlq := &retryv1alpha1.DeadLetterQueue{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, dlq); err != nil {
		if apierrors.IsNotFound(err) {
			ps.add(&problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true,
				Message: fmt.Sprintf("DeadLetterQueue %q not found", name)})
			return nil, "", nil
		}
		return nil, "", err
	}
	topic := string(dlq.Spec.Topic.Name)
	// Nor to one the claim policy gives another namespace, whatever the ledger recorded before it.
	if pr := r.claimProblem(dlq, topic); pr != nil {
		ps.add(&problem{Reason: retryv1alpha1.ReasonTopicClaimRefused, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
			"DeadLetterQueue %q: %s; no dead letters are sent there", name, pr.Message), maxConditionMessage)})
		return nil, topic, nil //nolint:nilerr // the refusal is the pipeline's topic problem, reported in its conditions
	}
	// Dead letters go only to a topic the queue manages (created or adopted): never, with the
	// operator's credentials, to a topic of someone else's that a queue merely names.
	owned, err := r.Ledger.Owns(ctx, dlq, topic)
	if err != nil {
		return nil, topic, err
	}
	if !owned {
		ps.add(&problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemWaiting, Progress: true, Message: fmt.Sprintf(
			"DeadLetterQueue %q does not manage its topic %q yet (see its TopicReady condition): no dead letters are sent there until it does", name, topic)})
		return nil, topic, nil
	}
	return dlq, topic, nil
}
