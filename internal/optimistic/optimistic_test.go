package optimistic

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestWritesCarryTheResourceVersion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}
	writes := 0
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(ns).WithStatusSubresource(ns).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			writes++
			return c.Patch(ctx, obj, patch, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			writes++
			return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	})
	fresh := func() *corev1.Namespace {
		n := &corev1.Namespace{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: "team"}, n)).To(Succeed())
		return n
	}

	n := fresh()
	stale := n.DeepCopy()
	g.Expect(AddFinalizer(ctx, c, n, "example.com/f")).To(Succeed())
	g.Expect(AddFinalizer(ctx, c, n, "example.com/f")).To(Succeed())
	g.Expect(writes).To(Equal(1), "nothing to write the second time")
	g.Expect(fresh().Finalizers).To(ConsistOf("example.com/f"))

	// A write computed from a stale read is refused.
	err := SetAnnotation(ctx, c, stale, "example.com/a", "1")
	g.Expect(apierrors.IsConflict(err)).To(BeTrue(), "got %v", err)
	g.Expect(fresh().Annotations).NotTo(HaveKey("example.com/a"))

	n = fresh()
	g.Expect(SetAnnotation(ctx, c, n, "example.com/a", "1")).To(Succeed())
	g.Expect(fresh().Annotations).To(HaveKeyWithValue("example.com/a", "1"))
	g.Expect(SetAnnotation(ctx, c, n, "example.com/a", "")).To(Succeed())
	g.Expect(fresh().Annotations).NotTo(HaveKey("example.com/a"))

	writes = 0
	n = fresh()
	written, err := PatchStatus(ctx, c, n, func(*corev1.Namespace) {})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(BeFalse())
	written, err = PatchStatus(ctx, c, n, func(n *corev1.Namespace) { n.Status.Phase = corev1.NamespaceTerminating })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(written).To(BeTrue())
	g.Expect(writes).To(Equal(1))
	g.Expect(fresh().Status.Phase).To(Equal(corev1.NamespaceTerminating))

	g.Expect(RemoveFinalizer(ctx, c, n, "example.com/f")).To(Succeed())
	g.Expect(fresh().Finalizers).To(BeEmpty())
}
