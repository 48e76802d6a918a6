package apply

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// entriesOf counts the foundEqual entries of the owners of kind and name in namespace, whatever
// their UID.
func entriesOf(kind, namespace, name string) int {
	foundEqual.mu.Lock()
	defer foundEqual.mu.Unlock()
	return len(foundEqual.m[ownerID{kind, namespace, name}])
}

// TestARecreatedOwnerDoesNotPileUpEntries: an owner deleted and made again under the same name
// before a reconcile saw it gone (its finalizer removed by hand, `kubectl replace --force`) is
// never forgotten by ForgetOwner, which the controllers call only on NotFound or when they remove
// the finalizer. Each incarnation's child found equal must not leave an entry of its own behind:
// the one of the owner that is gone is the one the new owner's replaces.
func TestARecreatedOwnerDoesNotPileUpEntries(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	c := uncached{writes: writes{Client: api, sent: new([]string)}, api: api}
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	key := client.ObjectKey{Namespace: "recreate", Name: "rules"}
	render := func() (runtime.Object, error) {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}, Data: map[string]string{"rules.yaml": "v"}}, nil
	}
	digest := sha256.Sum256([]byte("v"))
	const incarnations = 50
	for i := range incarnations {
		owner := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "again", UID: types.UID(fmt.Sprintf("again-%d", i))}}
		// The previous owner's child went with it (garbage collection).
		g.Expect(client.IgnoreNotFound(api.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}))).To(Succeed())
		applied, err := OwnedRendered(ctx, c, owner, gvk, digest, render, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeTrue())
		live := &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, key, live)).To(Succeed())
		applied, err = OwnedRendered(ctx, c, owner, gvk, digest, render, live)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeFalse())
	}
	g.Expect(entriesOf("ConfigMap", key.Namespace, "again")).To(Equal(1), "one entry for the owner of that name that exists, none for the %d gone", incarnations-1)

	// The last owner still skips: its entry is the one kept.
	last := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "again", UID: types.UID(fmt.Sprintf("again-%d", incarnations-1))}}
	live := &corev1.ConfigMap{}
	g.Expect(api.Get(ctx, key, live)).To(Succeed())
	rendered := false
	_, err := OwnedRendered(ctx, c, last, gvk, digest, func() (runtime.Object, error) { rendered = true; return render() }, live)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rendered).To(BeFalse())

	ForgetOwner("ConfigMap", key.Namespace, "again")
	g.Expect(entriesOf("ConfigMap", key.Namespace, "again")).To(BeZero())
}
