package controllers

import (
	"context"
	"fmt"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// checkReplayTarget refuses a Replay's spec.target.topic that the operator manages as a
// dead-letter queue, a record of decisions or a retry tier, before the action writes anything: a
// record replayed into a state topic records whatever decision its value says, under any
// requestedBy (the admission policy on requestedBy then means nothing), and one replayed into a
// queue or another pipeline's tier reaches consumers that never asked for it. The name rules
// (deadletters.CheckTopicTarget) are the API's CEL rules, checked again for actions stored before
// them; the topic ledger, which CEL cannot see, knows the rest: a topic any queue's record holds is
// refused, and of a pipeline's record only its source topic is allowed (replaying into a source
// topic is a legitimate use: every consumer group of that topic receives the records). The
// problem is a user error: the action fails (its spec is immutable).
func (r *DeadLetterActionReconciler) checkReplayTarget(ctx context.Context, a *retryv1alpha1.DeadLetterAction) *problem {
	t := a.Spec.Target
	if a.Spec.Action != retryv1alpha1.DeadLetterReplay || t == nil || t.Topic == "" {
		return nil
	}
	topic := string(t.Topic)
	refuse := func(what string) *problem {
		return &problem{Reason: retryv1alpha1.ReasonReplayTargetRefused, Kind: problemUser, Message: truncate(fmt.Sprintf(
			"target.topic %q %s: a replay never writes into a topic the operator manages as a dead-letter queue, a record of decisions or a retry topic; "+
				"replay through a pipeline (target.pipeline, or no target: each dead letter's own pipeline) or into a source topic; nothing was written",
			topic, what), maxConditionMessage)}
	}
	if err := deadletters.CheckTopicTarget(topic); err != nil {
		return refuse(err.Error())
	}
	holders, err := r.Ledger.Holders(ctx, topic)
	if err != nil {
		return &problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err, Message: err.Error()}
	}
	for _, h := range holders {
		if role, ok := ledgerRole(h, topic); !ok {
			return refuse(fmt.Sprintf("is the %s of %s", role, h))
		}
	}
	return nil
}

// checkTargetClaim refuses a Replay's spec.target.topic that the manager's claim policy
// (--topic-prefix) does not give the action's namespace, or that is named like a record of
// decisions (claimProblem). It reads the spec alone, so it comes first, before the queue is looked
// up: the action fails at once (its spec is immutable), where waiting would look at it again every
// actionWaitRequeue for ever.
func (r *DeadLetterActionReconciler) checkTargetClaim(a *retryv1alpha1.DeadLetterAction) *problem {
	t := a.Spec.Target
	if a.Spec.Action != retryv1alpha1.DeadLetterReplay || t == nil || t.Topic == "" {
		return nil
	}
	p := r.claimProblem(a, string(t.Topic))
	if p != nil {
		p.Message = truncate("target.topic refused: "+p.Message+"; nothing was written", maxConditionMessage)
	}
	return p
}

// ledgerRole names what topic is to the resource whose ledger record h holds it, and whether a
// replay may write into it: only a pipeline's source topic (deadletters.TopicRole).
func ledgerRole(h kafkaspec.Holder, topic string) (role string, allowed bool) {
	return deadletters.TopicRole(deadletters.Holder(h), topic)
}

// topicHolders is the topic ledger as the dead-letter engine checks a Replay's targets against it
// (deadletters.Options.Holders).
func (r *DeadLetterActionReconciler) topicHolders(ctx context.Context, topic string) ([]deadletters.Holder, error) {
	hs, err := r.Ledger.Holders(ctx, topic)
	out := make([]deadletters.Holder, len(hs))
	for i, h := range hs {
		out[i] = deadletters.Holder(h)
	}
	return out, err
}
