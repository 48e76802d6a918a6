package controllers_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// TestAlertRulesSkippedWhileUnchangedStillFollowEveryChange: once a queue's rule ConfigMap was found
// equal (the resyncs that follow no longer render it, apply.OwnedRendered), a spec change is still
// applied, a deleted rule object is made again, a rule object of that name someone else's is a
// conflict at every resync until it goes, and a queue deleted and made again under the same name
// gets rules of its own.
func TestAlertRulesSkippedWhileUnchangedStillFollowEveryChange(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	q := newDLQ(ns, "skip", ns+".skip")
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	rules := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.DeadLetterQueueAlertsName(q)}}
	}
	cm := rules()
	g.Eventually(getter(cm), wait, poll).Should(ownedBy(q, "DeadLetterQueue"))
	key := render.RuleFileKey(ns, q.Name, "deadletterqueue")
	steady := func() {
		t.Helper()
		// Resyncs that find the rules in place write nothing (and, after the first, render nothing).
		rv := cm.ResourceVersion
		g.Consistently(func() (string, error) { got, err := getter(rules())(); return got.ResourceVersion, err }, oneResync, poll).Should(Equal(rv))
	}
	steady()

	// A spec change.
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) {
		q.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](777)}
	})
	g.Eventually(func() (string, error) { _, err := getter(cm)(); return cm.Data[key], err }, wait, poll).Should(ContainSubstring("> 777"))
	steady()

	// Deleted out of band.
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
	g.Eventually(func() (string, error) { cm = rules(); _, err := getter(cm)(); return cm.Data[key], err }, wait, poll).Should(ContainSubstring("> 777"))
	g.Expect(cm).To(ownedBy(q, "DeadLetterQueue"))
	steady()

	// Taken over by someone else (its controller reference removed: deleting it and creating theirs
	// would race the operator making its own again): a conflict, at every resync, until it goes.
	theirs := cm.DeepCopy()
	theirs.OwnerReferences = nil
	theirs.Data = map[string]string{key: "groups: []\n"}
	g.Expect(env.Client.Update(ctx, theirs)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(notReady(retryv1alpha1.ReasonChildConflict))
	g.Consistently(dlqReady(q), oneResync, poll).Should(notReady(retryv1alpha1.ReasonChildConflict))
	g.Expect(getter(theirs)()).To(HaveField("Data", HaveKeyWithValue(key, "groups: []\n")), "never adopted nor overwritten")
	g.Expect(env.Client.Delete(ctx, theirs)).To(Succeed())
	g.Eventually(func() (string, error) { cm = rules(); _, err := getter(cm)(); return cm.Data[key], err }, wait, poll).Should(ContainSubstring("> 777"))
	g.Expect(cm).To(ownedBy(q, "DeadLetterQueue"))
	steady()

	// Deleted and made again under the same name (without a spec change): its own rules.
	g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
	g.Eventually(gone(q), wait, poll).Should(BeTrue())
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed(), "what the garbage collector (not in this suite) would do")
	again := newDLQ(ns, "skip", ns+".skip")
	again.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](777)}
	g.Expect(env.Client.Create(ctx, again)).To(Succeed())
	g.Eventually(func() (client.Object, error) { cm = rules(); return getter(cm)() }, wait, poll).Should(ownedBy(again, "DeadLetterQueue"))
	g.Expect(cm.Data[key]).To(ContainSubstring("> 777"))
}
