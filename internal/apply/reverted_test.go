package apply

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestAnEditRevertedBeforeTheCacheCaughtUpIsApplied: the inputs of a child change and change back
// (a RetryPolicy edited, then the edit undone) while the cache still shows the version both applies
// were made over. Only the last apply over a version counts: the child holds the second one, so the
// first, wanted again, is applied again rather than skipped as applied already.
func TestAnEditRevertedBeforeTheCacheCaughtUpIsApplied(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cache := NewCache(nil, 0)
	owner := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "owner-uid"}}
	child := func(v string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child"}, Data: map[string]string{"k": v}}
		g.Expect(controllerutil.SetControllerReference(owner, cm, clientgoscheme.Scheme)).To(Succeed())
		return cm
	}
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(child("old")).Build()
	c := uncached{writes: writes{Client: api, sent: new([]string)}, api: api}
	stale := &corev1.ConfigMap{}
	g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "child"}, stale)).To(Succeed())

	for _, v := range []string{"a", "b", "a"} {
		_, applied, err := Owned(ctx, c, cache, owner, child(v), stale)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeTrue(), "%q is not what the child holds", v)
	}
	got := &corev1.ConfigMap{}
	g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "child"}, got)).To(Succeed())
	g.Expect(got.Data).To(Equal(map[string]string{"k": "a"}))

	// Once applied, the same apply over that version is skipped again.
	_, applied, err := Owned(ctx, c, cache, owner, child("a"), stale)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse())
}
