package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
)

// A Replay goes through a pipeline's first retry topic only while that topic is the pipeline's
// alone: a queue that made it first (its dead-letter topic, named as the pipeline's first tier
// would be; the pipeline then reports a TopicConflict and leaves it) has made it a dead-letter
// topic, and the replayed records would be dead letters of that queue. The dead letter is skipped as
// having no target, and nothing is written there.
func TestReplayNeverGoesThroughATierAQueueTook(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	q := newDLQ(ns, "dlq", ns+".dlq")
	q.Spec.Topic.Partitions = 1
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	tier := ns + ".orders.retry.1"
	thief := newDLQ(ns, "thief", tier)
	thief.Spec.Topic.Partitions = 1
	g.Expect(env.Client.Create(ctx, thief)).To(Succeed())
	g.Eventually(dlqReady(thief), wait, poll).Should(isReady())
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())
	p := newPipeline(ns, "orders", ns+".src", "chatbot", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict), HaveField("Message", ContainSubstring(tier))))
	g.Expect(p.Status.Topics.Retries[0].Name).To(Equal(tier))
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	writeDeadLetters(t, ns+".dlq", ns+".src", ns+"/orders", []actionDeadLetter{{reason: headers.ReasonNonRetriable, errorType: "HTTP422"}})
	a := newAction(ns, "replay", "dlq", retryv1alpha1.DeadLetterReplay, nil)
	g.Expect(env.Client.Create(ctx, a)).To(Succeed())
	g.Eventually(actionPhase(a), wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(held(adm, tier)()).To(BeZero(), "replayed into %s, the topic of queue thief: action done %d, skipped %v", tier, a.Status.Done, a.Status.Skipped)
	g.Expect(a.Status.Done).To(BeZero())
}
