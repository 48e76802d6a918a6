package apply

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestTheMemoForgetsTheChildrenOfOwnersThatAreGone: 1,000 owners each apply a child over a version
// the cache has not caught up with (each leaves an entry) and are deleted; nothing looks those
// entries up again, so the owners' deletion must drop them, or the memo grows with every owner the
// manager ever saw. Another kind's owner of the same name keeps its entry.
func TestTheMemoForgetsTheChildrenOfOwnersThatAreGone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	before := appliedOver.len()
	owner := func(i int) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "churn", Name: fmt.Sprintf("owner-%d", i), UID: types.UID(fmt.Sprintf("churn-%d", i))}}
	}
	child := func(i int, v string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "churn", Name: fmt.Sprintf("child-%d", i)}, Data: map[string]string{"k": v}}
		g.Expect(controllerutil.SetControllerReference(owner(i), cm, clientgoscheme.Scheme)).To(Succeed())
		return cm
	}
	const n = 1000
	b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
	for i := range n {
		b = b.WithObjects(child(i, "old"))
	}
	api := b.Build()
	c := uncached{writes: writes{Client: api, sent: new([]string)}, api: api}
	for i := range n {
		live := &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "churn", Name: fmt.Sprintf("child-%d", i)}, live)).To(Succeed())
		_, applied, err := Owned(ctx, c, owner(i), child(i, "new"), live)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeTrue())
	}
	g.Expect(appliedOver.len()-before).To(Equal(n), "one entry per child applied over a version not seen since")

	ForgetOwner("Secret", "churn", "owner-0")
	g.Expect(appliedOver.len()-before).To(Equal(n), "another kind's owner of that name is not this one")
	for i := range n {
		ForgetOwner("ConfigMap", "churn", fmt.Sprintf("owner-%d", i))
	}
	g.Expect(appliedOver.len()).To(Equal(before), "the owners are gone, and so are their entries")
}
