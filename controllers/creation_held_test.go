package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// TestNoCreationTakesATopicAnotherRecordHolds: a resource's ledger record holds a topic that does
// not exist (yet): the state between the holder recording it and creating it, which the holder
// does in that order, or after the topic was deleted outside the operator. A queue naming that
// topic as its own, and a pipeline creating it as its source, would create it and record it too:
// both would then manage (trim, reconfigure, delete) one topic, as an adoption of it would. Each is
// refused (TopicConflict naming the holder) and records nothing, as when the topic exists.
func TestNoCreationTakesATopicAnotherRecordHolds(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	g.Eventually(dlqReady(dlq), wait, poll).Should(isReady())
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())

	// The holder is never reconciled (the suite manager ignores it): its record stays as written.
	holder := newPipeline(ns, "holder", ns+".orders", "chatbot", "dlq")
	holder.Labels = map[string]string{benchmarkLabel: "true"}
	g.Expect(env.Client.Create(ctx, holder)).To(Succeed())
	t.Cleanup(func() { letGo(t, holder) })
	queueTopic, sourceTopic := ns+".taken-dlq", ns+".taken-src"
	writeLedger(t, holder, ns+".orders", queueTopic, sourceTopic)
	by := "ConsumerPipeline " + ns + "/holder"

	q := newDLQ(ns, "late", queueTopic)
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(Or(isReady(), notReady(retryv1alpha1.ReasonTopicConflict)))
	g.Expect(dlqReady(q)()).To(And(notReady(retryv1alpha1.ReasonTopicConflict), HaveField("Message", ContainSubstring(by))),
		"the queue created and took a topic another resource's record holds")
	g.Expect(ledgerOf(q)()).NotTo(ContainElement(queueTopic))

	p := newPipeline(ns, "late", sourceTopic, "chatbot", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { letGo(t, p) })
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(Or(isReady(), notReady(retryv1alpha1.ReasonTopicConflict)))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()).To(And(notReady(retryv1alpha1.ReasonTopicConflict), HaveField("Message", ContainSubstring(by))),
		"the pipeline created and took a source another resource's record holds")
	g.Expect(ledgerOf(p)()).NotTo(ContainElement(sourceTopic))
}
