package apply

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestTheEntriesOfOwnersThatAreGoneExpire: 1,000 owners each apply a child over a version the
// cache has not caught up with (each leaves an entry) and are deleted, with nothing forgotten by
// hand; nothing looks those entries up again, and they go by themselves once unused for the TTL,
// or the cache would grow with every owner the manager ever saw. A held entry that is used lives on.
func TestTheEntriesOfOwnersThatAreGoneExpire(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	const ttl = 10 * time.Minute
	cache := NewCache(clk, ttl)
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
	stale := make([]*corev1.ConfigMap, n)
	for i := range n {
		stale[i] = &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "churn", Name: fmt.Sprintf("child-%d", i)}, stale[i])).To(Succeed())
		_, applied, err := Owned(ctx, c, cache, owner(i), child(i, "new"), stale[i])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeTrue())
	}
	g.Expect(cache.Len()).To(Equal(n), "one entry per child applied over a version not seen since")

	// The last owner lives on and its reconciles keep meeting the version it applied over: its
	// entry is used, and the apply is not sent again.
	sent := len(*c.sent)
	for range 5 { // two TTLs and a half: an entry lives at most two unused
		clk.Step(ttl / 2)
		_, applied, err := Owned(ctx, c, cache, owner(n-1), child(n-1, "new"), stale[n-1])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(applied).To(BeFalse(), "applied over this version already")
	}
	g.Expect(*c.sent).To(HaveLen(sent))
	g.Expect(cache.Len()).To(Equal(1), "the owners gone are forgotten by themselves; the one in use is kept")

	// Unused for longer than the TTL, it goes too, and the same apply is sent again.
	clk.Step(ttl + time.Second)
	_, applied, err := Owned(ctx, c, cache, owner(n-1), child(n-1, "new"), stale[n-1])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())
}

// A nil cache holds nothing: every apply over a stale version is sent.
func TestANilCacheHoldsNothing(t *testing.T) {
	g := NewWithT(t)
	var cache *Cache
	k := cacheKey{what: keyApplied, name: "x"}
	cache.add(k, [32]byte{})
	g.Expect(cache.has(k, [32]byte{})).To(BeFalse())
	g.Expect(cache.Len()).To(BeZero())
}
