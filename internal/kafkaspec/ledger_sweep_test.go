package kafkaspec_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// TestLedgerSweepDropsOnlyTheRecordsOfResourcesThatAreGone: a record whose resource is gone, or was
// created again under the same name (another UID), is deleted and returned with its topics; the
// records of live resources, young records and records whose resource cannot be read stay.
func TestLedgerSweepDropsOnlyTheRecordsOfResourcesThatAreGone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	young := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "op", Name: "topics-uid-young",
		CreationTimestamp: metav1.NewTime(now.Add(-time.Minute)),
		Labels:            map[string]string{kafkaspec.LedgerLabel: "deadletterqueue"},
		Annotations:       map[string]string{"retry.retryops.dev/resource": "DeadLetterQueue team/young"}},
		Data: map[string]string{"topics": "young.dlq"}}
	l, c := newLedger(t, now, young)

	live, gone, recreated, unreadable := queue("live", "1", now, nil), queue("gone", "2", now, nil), queue("again", "3", now, nil), queue("locked", "4", now, nil)
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders", UID: "uid-5"}}
	for o, topics := range map[client.Object][]string{live: {"live.dlq"}, gone: {"gone.dlq", "gone.dlq.state"}, recreated: {"again.dlq"}, unreadable: {"locked.dlq"}, p: {"orders", "orders.retry.1"}} {
		g.Expect(l.Record(ctx, o, topics...)).To(Succeed())
	}
	uids := map[string]k8stypes.UID{"DeadLetterQueue team/live": "uid-1", "DeadLetterQueue team/again": "uid-33", "DeadLetterQueue team/young": ""}
	var asked []string
	uidOf := func(_ context.Context, kind, ns, name string) (k8stypes.UID, error) {
		key := kind + " " + ns + "/" + name
		asked = append(asked, key)
		if name == "locked" {
			return "", apierrors.NewForbidden(schema.GroupResource{Resource: "deadletterqueues"}, name, errors.New("no"))
		}
		if uid, ok := uids[key]; ok {
			return uid, nil
		}
		return "", apierrors.NewNotFound(schema.GroupResource{Resource: kind}, name)
	}

	orphans, err := l.Sweep(ctx, uidOf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(orphans).To(ConsistOf(
		kafkaspec.Orphan{Kind: "DeadLetterQueue", Namespace: "team", Name: "gone", UID: "uid-2", Topics: []string{"gone.dlq", "gone.dlq.state"}},
		kafkaspec.Orphan{Kind: "DeadLetterQueue", Namespace: "team", Name: "again", UID: "uid-3", Topics: []string{"again.dlq"}},
		kafkaspec.Orphan{Kind: "ConsumerPipeline", Namespace: "team", Name: "orders", UID: "uid-5", Topics: []string{"orders", "orders.retry.1"}},
	))
	g.Expect(asked).NotTo(ContainElement("DeadLetterQueue team/young"), "a young record is not even looked at")

	left := &corev1.ConfigMapList{}
	g.Expect(c.List(ctx, left, client.InNamespace("op"))).To(Succeed())
	var names []string
	for _, cm := range left.Items {
		names = append(names, cm.Name)
	}
	g.Expect(names).To(ConsistOf("topics-uid-1", "topics-uid-4", "topics-uid-young"))
	// The memo goes with the record: the swept resource owns nothing any more, the live one still does.
	g.Expect(l.Owns(ctx, gone, "gone.dlq")).To(BeFalse())
	g.Expect(l.Owns(ctx, live, "live.dlq")).To(BeTrue())

	// A second sweep finds nothing more.
	g.Expect(l.Sweep(ctx, uidOf)).To(BeEmpty())
}
