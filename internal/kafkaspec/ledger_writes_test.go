package kafkaspec_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// sentWrites records the requests sent through it, refused ones included.
type sentWrites struct {
	client.Client
	sent []string
}

func (w *sentWrites) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	w.sent = append(w.sent, "create")
	return w.Client.Create(ctx, obj, opts...)
}

func (w *sentWrites) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	w.sent = append(w.sent, "patch")
	return w.Client.Patch(ctx, obj, patch, opts...)
}

// TestLedgerWritesEachChangeOnce: a record the ledger knows exists (it made or read it) is changed
// with one patch, without a create refused first (two changes: two requests, not three); one
// deleted behind its back is made again. A queue records its two topics in one change.
func TestLedgerWritesEachChangeOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l, c := newLedger(t, now)
	w := &sentWrites{Client: c}
	l.Writer = w
	q := queue("q", "1", now, nil)

	g.Expect(l.Record(ctx, q, "t")).To(Succeed())
	g.Expect(l.Record(ctx, q, "t.state")).To(Succeed())
	g.Expect(l.Record(ctx, q, "t")).To(Succeed(), "recorded already: nothing to write")
	g.Expect(w.sent).To(Equal([]string{"create", "patch"}))

	// A restarted manager reads the record, then changes it with a patch.
	w.sent = nil
	l2 := &kafkaspec.Ledger{Reader: c, Writer: w, Namespace: "op"}
	g.Expect(l2.Forget(ctx, q, "t.state")).To(Succeed())
	g.Expect(w.sent).To(Equal([]string{"patch"}))

	// Deleted by hand: made again at the next change.
	g.Expect(c.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "op", Name: "topics-uid-1"}})).To(Succeed())
	w.sent = nil
	g.Expect(l2.Record(ctx, q, "t.state")).To(Succeed())
	g.Expect(w.sent).To(Equal([]string{"patch", "create"}))
	cm := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "op", Name: "topics-uid-1"}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("topics", "t\nt.state"))
}
