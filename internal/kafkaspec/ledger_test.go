package kafkaspec_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

func newLedger(t *testing.T, now time.Time, objs ...client.Object) (*kafkaspec.Ledger, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := retryv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	return &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: "op", Clock: clocktesting.NewFakePassiveClock(now)}, c
}

func queue(name, uid string, created time.Time, annotations map[string]string) *retryv1alpha1.DeadLetterQueue {
	return &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, UID: k8stypes.UID("uid-" + uid),
		CreationTimestamp: metav1.NewTime(created), Annotations: annotations}}
}

// TestLedgerRecordsForgetsAndDrops also pins the ledger's stored form (the ConfigMap's name, its
// topics key, label and annotation): a change to it is a change of a stored format (see
// docs/development.md, "Stored formats and compatibility").
func TestLedgerRecordsForgetsAndDrops(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l, c := newLedger(t, now)
	q := queue("q", "1", now, nil)

	g.Expect(l.Topics(ctx, q)).To(BeEmpty())
	g.Expect(l.Record(ctx, q, "b", "a")).To(Succeed())
	g.Expect(l.Record(ctx, q, "a")).To(Succeed())
	g.Expect(l.Topics(ctx, q)).To(Equal([]string{"a", "b"}))
	cm := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "op", Name: "topics-uid-1"}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("topics", "a\nb"))
	g.Expect(cm.Labels).To(HaveKeyWithValue(kafkaspec.LedgerLabel, "deadletterqueue"))
	g.Expect(cm.Annotations).To(HaveKeyWithValue("retry.retryops.dev/resource", "DeadLetterQueue team/q"))

	// A second ledger (a restarted manager) reads the same record.
	l2 := &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: "op"}
	g.Expect(l2.Owns(ctx, q, "b")).To(BeTrue())
	g.Expect(l2.Forget(ctx, q, "b")).To(Succeed())
	g.Expect(l2.Topics(ctx, q)).To(Equal([]string{"a"}))
	g.Expect(l2.Drop(ctx, q.UID)).To(Succeed())
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "op", Name: "topics-uid-1"}, cm)).NotTo(Succeed())
	g.Expect(l2.Drop(ctx, q.UID)).To(Succeed(), "dropping twice is fine")
}

// TestLedgerIgnoresTheCreatedTopicsAnnotation: retry.retryops.dev/created-topics, which the resource's
// author can write, never enters the ledger, however old the resource and whichever manager (first
// or restarted) meets it first: nothing is recorded, owned or served for it.
func TestLedgerIgnoresTheCreatedTopicsAnnotation(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	forged := map[string]string{"retry.retryops.dev/created-topics": "other.payments,other.payments.state"}
	old := queue("old", "old", now.Add(-365*24*time.Hour), forged)
	l, c := newLedger(t, now)
	g.Expect(l.Topics(ctx, old)).To(BeEmpty())
	g.Expect(l.Owns(ctx, old, "other.payments")).To(BeFalse())

	// A restarted manager, started later still, with a resource created just before it.
	restarted := &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: "op", Clock: clocktesting.NewFakePassiveClock(now.Add(time.Hour))}
	justBefore := queue("before-restart", "before-restart", now.Add(59*time.Minute), forged)
	for _, q := range []*retryv1alpha1.DeadLetterQueue{old, justBefore} {
		g.Expect(restarted.Topics(ctx, q)).To(BeEmpty(), q.Name)
		g.Expect(restarted.Recorded(ctx, q, "other.payments")).To(BeFalse(), q.Name)
	}
	list := &corev1.ConfigMapList{}
	g.Expect(c.List(ctx, list, client.InNamespace("op"))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty(), "nothing is written to the ledger for an annotation")
}

// TestLedgerHoldersOf: one list of the ledger says, for each topic asked about, every resource whose
// record holds it.
func TestLedgerHoldersOf(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l, _ := newLedger(t, now)
	a, b := queue("a", "a", now, nil), queue("b", "b", now, nil)
	g.Expect(l.Record(ctx, a, "t", "a.state")).To(Succeed())
	g.Expect(l.Record(ctx, b, "t")).To(Succeed())
	by, err := l.HoldersOf(ctx, "t", "a.state", "nobody")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(by).To(HaveLen(2))
	g.Expect(by["t"]).To(ConsistOf(
		HaveField("String()", "DeadLetterQueue team/a"), HaveField("String()", "DeadLetterQueue team/b")))
	g.Expect(by["a.state"]).To(ConsistOf(And(HaveField("String()", "DeadLetterQueue team/a"), HaveField("Topics", []string{"a.state", "t"}))))
	g.Expect(by["a.state"][0].Is("DeadLetterQueue", "team", "a")).To(BeTrue())
	g.Expect(by["a.state"][0].Is("ConsumerPipeline", "team", "a")).To(BeFalse())
	g.Expect(l.Holders(ctx, "nobody")).To(BeEmpty())
}
