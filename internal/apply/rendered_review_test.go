package apply

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestARecreatedOwnerDoesNotPileUpEntries: an owner deleted and made again under the same name
// (its finalizer removed by hand, `kubectl replace --force`) leaves, for each incarnation, an entry
// of its child found equal, and nothing forgets them: they must go by themselves once unused, while
// the owner that exists keeps skipping its rendering.
func TestARecreatedOwnerDoesNotPileUpEntries(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	const ttl = 10 * time.Minute
	cache := NewCache(clk, ttl)
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
		applied, err := OwnedRendered(ctx, c, cache, owner, gvk, digest, render, nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeTrue())
		live := &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, key, live)).To(Succeed())
		applied, err = OwnedRendered(ctx, c, cache, owner, gvk, digest, render, live)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeFalse())
	}

	// The last owner still skips, a resync after another, and its entry is the only one left.
	last := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: "again", UID: types.UID(fmt.Sprintf("again-%d", incarnations-1))}}
	live := &corev1.ConfigMap{}
	g.Expect(api.Get(ctx, key, live)).To(Succeed())
	for range 5 { // two TTLs and a half: an entry lives at most two unused
		clk.Step(ttl / 2)
		rendered := false
		_, err := OwnedRendered(ctx, c, cache, last, gvk, digest, func() (runtime.Object, error) { rendered = true; return render() }, live)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rendered).To(BeFalse())
	}
	g.Expect(cache.Len()).To(Equal(1), "one entry for the owner of that name that exists, none for the %d gone", incarnations-1)
}
