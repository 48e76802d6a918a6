package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// A pipeline as the release before fan-out left it (tiers <source>.retry.*, in its status and its
// ledger record, records waiting in the first) is reconciled by this one: the new tiers
// (<namespace>.<name>.retry.*) are created and configured, the old ones drain (topics.draining),
// the empty one goes once the consumers rolled out, and the other once its records are consumed
// (deletionPolicy Delete); nothing is renamed by hand.
func TestUpgradeDrainsTheTiersNamedAfterTheSource(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	adm := newKadm(t)
	g.Eventually(dlqReady(dlq), wait, poll).Should(isReady())
	source := ns + ".orders"
	old1, old2 := source+".retry.1", source+".retry.2"
	for _, topic := range []string{source, old1, old2} {
		createTopic(t, adm, topic, 1)
	}
	produce(t, broker.ListenAddrs(), old1, map[int32]int{0: 2})
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 3, time.Second, time.Minute))).To(Succeed())

	p := newPipeline(ns, "legacy", source, "p", "dlq")
	p.Labels = map[string]string{benchmarkLabel: "true"}
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { letGo(t, p) })
	writeLedger(t, p, old1, old2)
	before := p.DeepCopy()
	p.Status.Topics = &retryv1alpha1.PipelineTopics{Source: source, SourcePartitions: 1, Retries: []retryv1alpha1.RetryTopicStatus{
		{Name: old1, Delay: metav1.Duration{Duration: time.Second}, Partitions: 1},
		{Name: old2, Delay: metav1.Duration{Duration: 2 * time.Second}, Partitions: 1},
	}}
	g.Expect(env.Client.Status().Patch(ctx, p, client.MergeFrom(before))).To(Succeed())

	r := claimsReconciler(t, kafkaspec.Tenancy{})
	reconciled := func(f func() (configTopics, error)) func() (configTopics, error) {
		return func() (configTopics, error) {
			_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			return f()
		}
	}
	exists := func(topic string) func() (bool, error) {
		return func() (bool, error) {
			_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
			st, err := describe(adm, topic)()
			return st.Exists, err
		}
	}
	new1, new2 := ns+".legacy.retry.1", ns+".legacy.retry.2"
	g.Eventually(reconciled(dispatcherTopics(p)), wait, poll).Should(Equal(configTopics{Retries: []string{new1, new2}, Draining: []string{old1}}))
	g.Expect(describe(adm, new1)()).To(HaveField("Exists", true))
	g.Expect(describe(adm, new2)()).To(HaveField("Exists", true))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	g.Expect(tiersOf(p)).To(Equal([]tierSummary{{new1, time.Second, 1}, {new2, 2 * time.Second, 1}}))
	g.Expect(describe(adm, old1)()).To(HaveField("Exists", true), "records wait in it")

	rollOut(t, p)
	g.Eventually(exists(old2), wait, poll).Should(BeFalse(), "the empty old tier goes")
	g.Expect(describe(adm, old1)()).To(HaveField("Exists", true), "records still wait in it")

	commitOffsets(t, adm, ns+".legacy", map[string]map[int32]int64{old1: {0: 2}})
	g.Eventually(reconciled(dispatcherTopics(p)), wait, poll).Should(Equal(configTopics{Retries: []string{new1, new2}}))
	g.Eventually(exists(old1), wait, poll).Should(BeFalse(), "the drained old tier goes")
	g.Expect(ledgerOf(p)()).To(Equal([]string{new1, new2}))
}
