package controllers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// writeLedger writes o's record in the topic ledger as the operator writes it.
func writeLedger(t *testing.T, o client.Object, topics ...string) {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(o.GetUID())}}
	_, err := controllerutil.CreateOrPatch(ctx, env.Client, cm, func() error {
		cm.Labels = map[string]string{kafkaspec.LedgerLabel: "consumerpipeline"}
		cm.Annotations = map[string]string{"retry.retryops.dev/resource": "ConsumerPipeline " + o.GetNamespace() + "/" + o.GetName()}
		slices.Sort(topics)
		cm.Data = map[string]string{"topics": strings.Join(topics, "\n")}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ledgerOf returns the topics the ledger records for o.
func ledgerOf(o client.Object) func() ([]string, error) {
	return func() ([]string, error) {
		cm := &corev1.ConfigMap{}
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(o.GetUID())}, cm)
		if err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return strings.Split(cm.Data["topics"], "\n"), nil
	}
}

// Three pipelines on one source, two of which ask to create it: each is Ready with tiers named
// after itself; the first to record the source owns it; deleting the owner (Delete) deletes its
// tiers only and keeps the source and the others' tiers.
func TestThreePipelinesOnOneSource(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".orders"
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 3, time.Second, time.Minute))).To(Succeed())

	var ps []*retryv1alpha1.ConsumerPipeline
	for _, name := range []string{"billing", "shipping", "audit"} {
		p := newPipeline(ns, name, source, "p", "dlq")
		if name != "audit" {
			p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 2}
		}
		p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady(), name)
		ps = append(ps, p)
	}
	for _, p := range ps {
		g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady(), p.Name)
		want := []tierSummary{{ns + "." + p.Name + ".retry.1", time.Second, 2}, {ns + "." + p.Name + ".retry.2", 2 * time.Second, 2}}
		g.Expect(tiersOf(p)).To(Equal(want), p.Name)
		for _, tier := range want {
			g.Expect(describe(adm, tier.Name)()).To(HaveField("Partitions", 2), tier.Name)
		}
	}
	billing, shipping, audit := ps[0], ps[1], ps[2]
	g.Expect(ledgerOf(billing)()).To(ContainElement(source), "the first to ask records the source")
	g.Expect(ledgerOf(shipping)()).NotTo(ContainElement(source), "the second consumes it")
	g.Expect(ledgerOf(audit)()).NotTo(ContainElement(source))

	g.Expect(env.Client.Delete(ctx, billing)).To(Succeed())
	g.Eventually(gone(billing), wait, poll).Should(BeTrue())
	g.Expect(describe(adm, ns+".billing.retry.1")()).To(HaveField("Exists", false))
	g.Expect(describe(adm, ns+".billing.retry.2")()).To(HaveField("Exists", false))
	g.Expect(describe(adm, source)()).To(HaveField("Exists", true), "the source stays")
	for _, p := range []*retryv1alpha1.ConsumerPipeline{shipping, audit} {
		for _, tier := range tiersOf(p) {
			g.Expect(describe(adm, tier.Name)()).To(HaveField("Exists", true), tier.Name)
		}
		holdsThroughResync(t, p, pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), isReady(), p.Name)
	}
}

// Two pipelines joining one consumer group: the newer is refused, naming the older, and runs no
// consumers; it takes over when the older goes. (Created within one second, the one running keeps
// the group: TestSharingOwner.)
func TestPipelinesInOneConsumerGroupConflict(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := sharingFixture(t)
	createTopic(t, adm, ns+".a", 1)
	createTopic(t, adm, ns+".b", 1)
	older := newPipeline(ns, "a-older", ns+".a", "p", "dlq")
	older.Spec.Source.ConsumerGroup = ns + ".shared"
	g.Expect(env.Client.Create(ctx, older)).To(Succeed())
	g.Eventually(pipelineCondition(older, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	newer := newPipeline(ns, "b-newer", ns+".b", "p", "dlq")
	newer.Spec.Source.ConsumerGroup = ns + ".shared"
	g.Expect(env.Client.Create(ctx, newer)).To(Succeed())
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonConsumerGroupConflict),
		HaveField("Message", ContainSubstring("ConsumerPipeline "+ns+"/a-older"))))
	g.Expect(pipelineReady(newer)()).To(HaveField("Status", BeEquivalentTo("False")))
	g.Expect(consumers(newer)).To(BeNil(), "no consumers")
	g.Expect(describe(adm, ns+".b-newer.retry.1")()).To(HaveField("Exists", false), "no tiers")
	holdsThroughResync(t, older, pipelineCondition(older, retryv1alpha1.ConditionTopicsReady), isReady())

	g.Expect(env.Client.Delete(ctx, older)).To(Succeed())
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	g.Expect(describe(adm, ns+".b-newer.retry.1")()).To(HaveField("Exists", true))
}

// A pipeline whose tiers are another pipeline's (here a topic named as its first tier, written into
// the other's ledger record) is refused, naming it, and runs no consumers.
func TestPipelineTiersHeldByAnotherConflict(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := sharingFixture(t)
	source := ns + ".billing"
	createTopic(t, adm, source, 1)
	createTopic(t, adm, ns+".other", 1)
	holder := newPipeline(ns, "shipping", source, "p", "dlq")
	holder.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1, ExistingTopic: retryv1alpha1.ExistingTopicAdopt}
	g.Expect(env.Client.Create(ctx, holder)).To(Succeed())
	g.Eventually(pipelineCondition(holder, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	// The holder's record holds the name pipeline billing's first tier gets.
	taken := ns + ".billing.retry.1"
	createTopic(t, adm, taken, 1)
	writeLedger(t, holder, source, taken, ns+".shipping.retry.1")

	newcomer := newPipeline(ns, "billing", ns+".other", "p", "dlq")
	g.Expect(env.Client.Create(ctx, newcomer)).To(Succeed())
	g.Eventually(pipelineCondition(newcomer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", And(ContainSubstring(taken), ContainSubstring("ConsumerPipeline "+ns+"/shipping")))))
	g.Expect(consumers(newcomer)).To(BeNil(), "no consumers")
}

// Two pipelines whose tier bases are equal (here a name crafted as the shortened base of a long one:
// TierBase keeps the prefix of a long base and appends a hash) would share their tiers: the newer
// is refused with TopicConflict naming the older, creates no tier and runs no consumers.
func TestPipelinesWithOneTierBaseConflict(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := sharingFixture(t)
	createTopic(t, adm, ns+".a", 1)
	long := strings.Repeat("n", 253-len(ns)) // names past the base's limit once prefixed with the namespace
	base := dispatchercfg.TierBase("", ns, long)
	crafted := strings.TrimPrefix(base, ns+".")
	g.Expect(dispatchercfg.TierBase("", ns, crafted)).To(Equal(base))

	older := newPipeline(ns, long, ns+".a", "p", "dlq")
	older.Spec.Source.ConsumerGroup = ns + ".older"
	g.Expect(env.Client.Create(ctx, older)).To(Succeed())
	g.Eventually(ledgerOf(older), wait, poll).Should(ContainElement(base + ".retry.1"))

	newer := newPipeline(ns, crafted, ns+".a", "p", "dlq")
	newer.Spec.Source.ConsumerGroup = ns + ".newer"
	g.Expect(env.Client.Create(ctx, newer)).To(Succeed())
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", And(ContainSubstring(base+".retry.*"), ContainSubstring("ConsumerPipeline "+ns+"/"+long[:20])))))
	g.Expect(consumers(newer)).To(BeNil(), "no consumers")
	g.Expect(ledgerOf(newer)()).To(BeEmpty(), "no tiers of its own")
}

// Of two pipelines asking to create one source, the one that recorded it manages it: the other,
// even with existingTopic: Adopt and more partitions, consumes it as it is.
func TestASourceHasOneManager(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := sharingFixture(t)
	source := ns + ".orders"
	owner := newPipeline(ns, "billing", source, "p", "dlq")
	owner.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 2}
	g.Expect(env.Client.Create(ctx, owner)).To(Succeed())
	g.Eventually(pipelineCondition(owner, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	other := newPipeline(ns, "audit", source, "p", "dlq")
	other.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 4, ExistingTopic: retryv1alpha1.ExistingTopicAdopt}
	g.Expect(env.Client.Create(ctx, other)).To(Succeed())
	g.Eventually(pipelineCondition(other, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	holdsThroughResync(t, other, pipelineCondition(other, retryv1alpha1.ConditionTopicsReady), isReady())
	g.Expect(describe(adm, source)()).To(HaveField("Partitions", 2), "the owner's partitions")
	g.Expect(ledgerOf(other)()).NotTo(ContainElement(source))
}

// sharingFixture creates a namespace whose DeadLetterQueue "dlq" is Ready and a RetryPolicy "p" of
// two attempts, for the tests of pipelines sharing a source, a group or tiers.
func sharingFixture(t *testing.T) (string, *testKafka) {
	t.Helper()
	ns, dlq := pipelineFixture(t)
	NewWithT(t).Eventually(dlqReady(dlq), wait, poll).Should(isReady())
	if err := env.Client.Create(context.Background(), backoffPolicy(ns, "p", 2, time.Second, time.Minute)); err != nil {
		t.Fatal(err)
	}
	return ns, newKadm(t)
}
