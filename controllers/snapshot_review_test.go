package controllers_test

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// TestAPipelineRecreatesTheTiersItDeletedWhenItsPolicyWantsThemBack: under deletionPolicy Delete,
// the tiers a policy change left behind are deleted (and forgotten by the ledger); the policy
// raised again wants them back. The pipeline's generation did not change and its topics were
// settled, so it reads the connection's snapshot of descriptions: a deletion the operator made
// itself must be in it, or the snapshot says the tiers exist (and, unowned, someone else's) until
// the next round, which on this still clock never comes.
func TestAPipelineRecreatesTheTiersItDeletedWhenItsPolicyWantsThemBack(t *testing.T) {
	r := startSteadyRun(t, 1, 1, steadyInterval)
	r.settle()
	g := NewWithT(t)
	label := map[string]string{benchmarkLabel: r.ns}
	rp := backoffPolicy(r.ns, "four", 4, time.Second, time.Minute)
	rp.SetLabels(label)
	g.Expect(r.api.Create(r.ctx, rp)).To(Succeed())
	p := newPipeline(r.ns, "cpl-del", "steady.del", "four", "dlq-000")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	p.SetLabels(label)
	g.Expect(r.api.Create(r.ctx, p)).To(Succeed())
	base := r.ns + ".cpl-del.retry."
	tiers := []string{base + "1", base + "2", base + "3"}
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers}))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers[:1]}))
	rollOut(t, p)
	adm := newKadm(t, r.clusters[0].ListenAddrs()...)
	for _, tier := range tiers[1:] {
		g.Eventually(describe(adm, tier), wait, poll).Should(HaveField("Exists", false), "%s deleted", tier)
	}
	g.Eventually(pipelineTopicsOf(p), wait, poll).Should(HaveField("UnusedRetries", BeEmpty()))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 4 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers}))
	for _, tier := range tiers[1:] {
		g.Eventually(describe(adm, tier), wait, poll).Should(HaveField("Exists", true), "%s recreated", tier)
	}
	g.Eventually(func() (*metav1.Condition, error) {
		got := &retryv1alpha1.ConsumerPipeline{}
		if err := r.api.Get(r.ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return nil, err
		}
		return findCondition(got.Status.Conditions, retryv1alpha1.ConditionTopicsReady), nil
	}, wait, poll).Should(isReady())
	events, err := eventsFor(p.Namespace, p.Name)()
	g.Expect(err).NotTo(HaveOccurred())
	for _, e := range events {
		g.Expect(e.Type).NotTo(Equal(corev1.EventTypeWarning), "a Warning for the operator's own tiers coming back: %s: %s", e.Reason, e.Note)
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
