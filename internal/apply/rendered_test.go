package apply

import (
	"context"
	"crypto/sha256"
	"errors"
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

// TestOwnedRenderedSkipsTheRenderingOfAChildFoundEqual: a child whose rendering was found equal to
// the cached version is not rendered again while that version and the inputs' digest stay; a new
// digest, a new version of the child (an edit out of band), another UID (deleted and made again)
// or another owner's child is rendered and compared again, and an edit is reverted. Forgetting the
// owner drops the entry.
func TestOwnedRenderedSkipsTheRenderingOfAChildFoundEqual(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rules-owner", UID: "rules-owner-uid"}}
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	want := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rules"}, Data: map[string]string{"rules.yaml": v}}
	}
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build()
	sent := new([]string)
	c := uncached{writes: writes{Client: api, sent: sent}, api: api}
	renders := 0
	render := func(v string) func() (runtime.Object, error) {
		return func() (runtime.Object, error) { renders++; return want(v), nil }
	}
	cached := func() client.Object {
		cm := &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "rules"}, cm)).To(Succeed())
		return cm
	}
	d1, d2 := sha256.Sum256([]byte("v1")), sha256.Sum256([]byte("v2"))

	applied, err := OwnedRendered(ctx, c, memo, owner, gvk, d1, render("v1"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "absent: rendered and applied")
	g.Expect(renders).To(Equal(1))

	applied, err = OwnedRendered(ctx, c, memo, owner, gvk, d1, render("v1"), cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse())
	g.Expect(renders).To(Equal(2), "the first comparison renders")
	for range 3 {
		applied, err = OwnedRendered(ctx, c, memo, owner, gvk, d1, render("v1"), cached())
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeFalse())
	}
	g.Expect(renders).To(Equal(2), "found equal at this version with this digest: never rendered again")
	g.Expect(*sent).To(Equal([]string{"apply"}))

	// An edit out of band: another version, rendered, compared and reverted.
	cm := cached().(*corev1.ConfigMap)
	cm.Data["rules.yaml"] = "edited"
	g.Expect(api.Update(ctx, cm)).To(Succeed())
	applied, err = OwnedRendered(ctx, c, memo, owner, gvk, d1, render("v1"), cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "the edit is reverted")
	g.Expect(renders).To(Equal(3))
	g.Expect(cached().(*corev1.ConfigMap).Data).To(Equal(map[string]string{"rules.yaml": "v1"}))

	// The reverted version is compared once, then skipped.
	for range 2 {
		_, err = OwnedRendered(ctx, c, memo, owner, gvk, d1, render("v1"), cached())
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(renders).To(Equal(4))

	// New inputs: rendered and applied at once.
	applied, err = OwnedRendered(ctx, c, memo, owner, gvk, d2, render("v2"), cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())
	g.Expect(renders).To(Equal(5))
	g.Expect(cached().(*corev1.ConfigMap).Data).To(Equal(map[string]string{"rules.yaml": "v2"}))
	_, err = OwnedRendered(ctx, c, memo, owner, gvk, d2, render("v2"), cached())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(renders).To(Equal(6))

	// The same name and version under another UID (deleted and made again): compared again.
	same := cached()
	same.SetUID("another-uid")
	_, err = OwnedRendered(ctx, c, memo, owner, gvk, d2, render("v2"), same)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(renders).To(Equal(7))

	// Another owner's child of that name: never skipped, a conflict every time.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", UID: "other-uid"}}
	for range 2 {
		_, err = OwnedRendered(ctx, c, memo, other, gvk, d2, render("v2"), cached())
		var ce *ConflictError
		g.Expect(errors.As(err, &ce)).To(BeTrue(), "%v", err)
	}
	g.Expect(renders).To(Equal(9))

	// A rendering error is returned, and nothing is remembered of it.
	_, err = OwnedRendered(ctx, c, memo, owner, gvk, d1, func() (runtime.Object, error) { return nil, errors.New("bad spec") }, cached())
	g.Expect(err).To(MatchError("bad spec"))
}

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
