package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// TestAdoptionNeverTakesATierAnotherPipelineHolds: a pipeline whose ledger record holds a topic it
// no longer uses (holder: <source>.retry.1, written into its record here; records wait in it, so
// it drains) and a pipeline whose own first tier has that name (orders on <namespace>.orders),
// asking to adopt existing topics (deletionPolicy Delete for both). The adopter does not take the tier the other
// holds: TopicConflict naming the other, nothing recorded, no consumers. Once the other has drained
// and deleted it (and its record forgot it), the adopter makes the tier its own.
func TestAdoptionNeverTakesATierAnotherPipelineHolds(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	adm := newKadm(t)
	g.Eventually(dlqReady(dlq), wait, poll).Should(isReady())
	source := ns + ".orders"
	tier := source + ".retry.1"
	createTopic(t, adm, source, 1)
	createTopic(t, adm, tier, 1)
	produce(t, broker.ListenAddrs(), tier, map[int32]int{0: 2})
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 2, time.Second, time.Minute))).To(Succeed())

	holder := newPipeline(ns, "holder", source, "p", "dlq")
	holder.Labels = map[string]string{benchmarkLabel: "true"}
	holder.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(env.Client.Create(ctx, holder)).To(Succeed())
	t.Cleanup(func() { letGo(t, holder) })
	writeLedger(t, holder, tier)

	adopter := newPipeline(ns, "orders", source, "p", "dlq")
	adopter.Labels = map[string]string{benchmarkLabel: "true"}
	adopter.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1, ExistingTopic: retryv1alpha1.ExistingTopicAdopt}
	adopter.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(env.Client.Create(ctx, adopter)).To(Succeed())
	t.Cleanup(func() { letGo(t, adopter) })

	r := claimsReconciler(t, kafkaspec.Tenancy{})
	reconcile := func(p *retryv1alpha1.ConsumerPipeline) {
		_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
	}
	topicsReady := func(p *retryv1alpha1.ConsumerPipeline) func() (*metav1.Condition, error) {
		return func() (*metav1.Condition, error) {
			reconcile(p)
			return pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()
		}
	}
	g.Eventually(func() (configTopics, error) {
		reconcile(holder)
		return dispatcherTopics(holder)()
	}, wait, poll).Should(Equal(configTopics{Retries: []string{ns + ".holder.retry.1"}, Draining: []string{tier}}))

	g.Eventually(topicsReady(adopter), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", And(ContainSubstring(tier), ContainSubstring("ConsumerPipeline "+ns+"/holder")))))
	for range 3 {
		reconcile(adopter)
	}
	g.Expect(pipelineCondition(adopter, retryv1alpha1.ConditionTopicsReady)()).To(notReady(retryv1alpha1.ReasonTopicConflict))
	g.Expect(ledgerOf(adopter)()).NotTo(ContainElement(tier), "the adopter recorded the tier the other pipeline drains")
	g.Expect(consumers(adopter)).To(Or(BeNil(), HaveField("Spec.Replicas", ptr.To(int32(0)))), "the adopter runs no consumers")
	g.Expect(held(adm, tier)()).To(Equal(int64(2)))

	// The other pipeline's group consumes the tier to the end: it is deleted and forgotten, and the
	// adopter makes the name its own.
	commitOffsets(t, adm, ns+".holder", map[string]map[int32]int64{tier: {0: 2}})
	g.Eventually(func() (bool, error) {
		reconcile(holder)
		rollOut(t, holder)
		st, err := describe(adm, tier)()
		return st.Exists, err
	}, wait, poll).Should(BeFalse(), "the drained tier goes")
	g.Expect(ledgerOf(holder)()).NotTo(ContainElement(tier))
	g.Eventually(topicsReady(adopter), wait, poll).Should(isReady())
	g.Expect(ledgerOf(adopter)()).To(ContainElement(tier))
	g.Expect(describe(adm, tier)()).To(HaveField("Exists", true))
}

// TestNothingAdoptsWhatAPipelineHolds: a queue asking to adopt (existingTopic: Adopt) a pipeline's
// retry topic or the source it created, with a count limit and deletionPolicy Delete, is refused
// (TopicConflict naming the pipeline): the records stay, and deleting the queue keeps the topic. A
// pipeline asking to adopt the other's retry topic as its source, with configs of its own, is
// refused the same way and leaves the topic's configs as they are.
func TestNothingAdoptsWhatAPipelineHolds(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	g.Expect(env.Client.Create(ctx, newDLQ(ns, "dlq", ns+".dlq"))).To(Succeed())
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())
	p := newPipeline(ns, "orders", ns+".src", "chatbot", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	tier := p.Status.Topics.Retries[0].Name
	holder := "ConsumerPipeline " + ns + "/orders"

	for i, topic := range []string{tier, ns + ".src"} {
		produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 3})
		q := newDLQ(ns, fmt.Sprintf("thief-%d", i), topic)
		q.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
		q.Spec.Topic.Partitions = 1
		q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxMessages: ptr.To(int64(1))}
		q.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
		g.Expect(env.Client.Create(ctx, q)).To(Succeed())
		g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
			HaveField("Message", And(ContainSubstring(topic), ContainSubstring(holder)))), topic)
		g.Expect(held(adm, topic)()).To(Equal(int64(3)), "%s trimmed by the queue", topic)
		g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
		g.Eventually(gone(q), wait, poll).Should(BeTrue())
		g.Expect(describe(adm, topic)()).To(HaveField("Exists", true), "%s deleted with the queue", topic)
		g.Expect(held(adm, topic)()).To(Equal(int64(3)))
	}

	before, err := describe(adm, tier)()
	g.Expect(err).NotTo(HaveOccurred())
	usurper := newPipeline(ns, "usurper", tier, "chatbot", "dlq")
	usurper.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1, ExistingTopic: retryv1alpha1.ExistingTopicAdopt, Config: map[string]string{"retention.ms": "1000"}}
	g.Expect(env.Client.Create(ctx, usurper)).To(Succeed())
	t.Cleanup(func() { letGo(t, usurper) })
	g.Eventually(pipelineCondition(usurper, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", And(ContainSubstring(tier), ContainSubstring(holder)))))
	g.Expect(ledgerOf(usurper)()).NotTo(ContainElement(tier))
	g.Expect(describe(adm, tier)()).To(Equal(before), "the tier was reconfigured as the usurper's source")
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
}
