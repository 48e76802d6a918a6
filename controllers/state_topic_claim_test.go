package controllers_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
)

// A queue's record of decisions is its own: no other resource creates or adopts a topic named like
// one. A second queue adopting <queue topic>.state as its dead-letter topic would have every
// pipeline using it write dead letters there (a dead letter keyed "0/0" whose value is a decision
// resolves dead letter 0/0 under any requestedBy), trim it (retention.maxMessages), reconfigure it
// and, under deletionPolicy Delete, delete it; a pipeline adopting it as its source would grow and
// reconfigure it. Both are refused, naming the rule, and the record of decisions is unchanged.
func TestNoOtherResourceTakesARecordOfDecisions(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	q := readyQueue(t, ns)
	state := ns + ".dlq.state"
	g.Expect(q.Status.StateTopic).To(Equal(state))
	writeDeadLetters(t, ns+".dlq", ns+".orders", ns+"/orders", []actionDeadLetter{{reason: headers.ReasonNonRetriable, errorType: "HTTP422"}})
	resolve := newAction(ns, "resolve", "dlq", retryv1alpha1.DeadLetterResolve, nil)
	resolve.Spec.Note = "fixed"
	g.Expect(env.Client.Create(ctx, resolve)).To(Succeed())
	g.Eventually(actionPhase(resolve), wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(held(adm, state)()).To(Equal(int64(1)))
	before := describe(adm, state)
	want := must(before())

	thief := newDLQ(ns, "thief", state)
	thief.Spec.Topic.Partitions = 1
	thief.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
	thief.Spec.Topic.Config = map[string]string{"cleanup.policy": "delete"}
	thief.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxMessages: ptr.To(int64(1))}
	thief.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, thief)).To(Succeed())
	g.Eventually(dlqReady(thief), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicClaimRefused),
		HaveField("Message", ContainSubstring("record of decisions"))), func() string {
		c := must(dlqReady(thief)())
		return fmt.Sprintf("queue thief: Ready %s %s %q; %s: %+v, %d records held", c.Status, c.Reason, c.Message, state, must(before()), must(held(adm, state)()))
	})

	// Refused as a user error, the thief waits for a change and is not reconciled again: the
	// reconciles of the queue that owns the record of decisions pace the checks.
	holdsThroughResync(t, q, before, Equal(want), "the record of decisions is not reconfigured")
	g.Expect(held(adm, state)()).To(Equal(int64(1)), "the decision is kept")
	g.Expect(env.Client.Delete(ctx, thief)).To(Succeed())
	g.Eventually(gone(thief), wait, poll).Should(BeTrue())
	g.Expect(describe(adm, state)()).To(HaveField("Exists", true), "deleting the other queue keeps the record of decisions")
	holdsThroughResync(t, q, eventsFor(ns, thief.Name), Not(ContainElement(HaveField("Reason", "TopicAdopted"))))

	// A pipeline adopting it as the source it creates.
	p := newPipeline(ns, "reader", state, "chatbot", "dlq")
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 4, ExistingTopic: retryv1alpha1.ExistingTopicAdopt, Config: map[string]string{"cleanup.policy": "delete"}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicClaimRefused),
		HaveField("Message", ContainSubstring("record of decisions"))), func() string {
		c := must(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)())
		return fmt.Sprintf("pipeline reader: TopicsReady %s %s %q; %s: %+v", c.Status, c.Reason, c.Message, state, must(before()))
	})
	holdsThroughResync(t, q, before, Equal(want), "the record of decisions is not reconfigured")
}
