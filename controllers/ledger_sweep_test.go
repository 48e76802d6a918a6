package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// TestLedgerSweepDropsTheRecordOfAForceDeletedQueue: a queue whose finalizer was removed by hand
// leaves its topic ledger record behind; the sweep deletes that record (and says which topics it
// held), while the record of a queue that still exists stays.
func TestLedgerSweepDropsTheRecordOfAForceDeletedQueue(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	forced, kept := newDLQ(ns, "forced", ns+".forced.dlq"), newDLQ(ns, "kept", ns+".kept.dlq")
	for _, q := range []*retryv1alpha1.DeadLetterQueue{forced, kept} {
		g.Expect(env.Client.Create(ctx, q)).To(Succeed())
		g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	}
	record := func(q *retryv1alpha1.DeadLetterQueue) func() error {
		return func() error {
			return env.Client.Get(ctx, client.ObjectKey{Namespace: controllers.DefaultOperatorNamespace, Name: "topics-" + string(q.UID)}, &corev1.ConfigMap{})
		}
	}
	g.Expect(record(forced)()).To(Succeed())
	g.Expect(record(kept)()).To(Succeed())

	// Remove the finalizer by hand and delete the queue before the manager puts it back.
	g.Eventually(func() error {
		q := &retryv1alpha1.DeadLetterQueue{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(forced), q); err != nil {
			return err
		}
		q.Finalizers = nil
		if err := env.Client.Update(ctx, q); err != nil {
			return err
		}
		return env.Client.Delete(ctx, q, client.Preconditions{ResourceVersion: &q.ResourceVersion})
	}, wait, poll).Should(Succeed())
	g.Eventually(gone(forced), wait, poll).Should(BeTrue())
	// Nothing reconciles a force-deleted queue again: its record stays until a sweep (asserted below).
	g.Expect(record(forced)()).To(Succeed(), "a force-deleted queue leaves its record")

	// A sweep an hour later (records younger than kafkaspec.LedgerSweepMinAge are left alone), with
	// the operator's own rights (config/rbac/role.yaml).
	op := asOperator(t, ns)
	ledger := &kafkaspec.Ledger{Reader: op, Writer: op, Namespace: controllers.DefaultOperatorNamespace,
		Clock: clocktesting.NewFakePassiveClock(time.Now().Add(time.Hour))}
	g.Eventually(func() error { return op.Get(ctx, client.ObjectKeyFromObject(kept), &retryv1alpha1.ConsumerPipeline{}) }, wait, poll).
		Should(WithTransform(apierrors.IsNotFound, BeTrue()), "the operator's binding reaches the authorizer")
	orphans := controllers.SweepLedger(ctx, op, ledger)
	g.Expect(orphans).To(ContainElement(kafkaspec.Orphan{Kind: "DeadLetterQueue", Namespace: ns, Name: "forced", UID: forced.UID,
		Topics: []string{ns + ".forced.dlq", ns + ".forced.dlq.state"}}))
	g.Expect(orphans).NotTo(ContainElement(And(HaveField("Namespace", ns), HaveField("Name", "kept"))))
	g.Expect(apierrors.IsNotFound(record(forced)())).To(BeTrue(), "the orphaned record is deleted")
	g.Expect(record(kept)()).To(Succeed(), "a live queue's record stays")
}
