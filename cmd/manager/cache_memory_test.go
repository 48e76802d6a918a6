package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
)

// TestTheManagersCacheHoldsNoManagedFieldsNorLastApplied: the manager's cache (as main builds it)
// stores objects without their managedFields and kubectl's last-applied annotation, which nothing
// reads from it (memory at 10,000 resources), and keeps everything else.
func TestTheManagersCacheHoldsNoManagedFieldsNorLastApplied(t *testing.T) {
	g := NewWithT(t)
	env := startEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cache-strip-"}}
	g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
	cm := corev1ac.ConfigMap("child", ns.Name).
		WithLabels(map[string]string{render.LabelManagedBy: render.LabelManagedByValue}).
		WithAnnotations(map[string]string{corev1.LastAppliedConfigAnnotation: `{"data":{"k":"v"}}`, "kept": "yes"}).
		WithData(map[string]string{"k": "v"})
	g.Expect(env.Client.Apply(ctx, cm, client.FieldOwner("test"))).To(Succeed())
	// The API server has them: without the transform the cache would too.
	live := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "child"}, live)).To(Succeed())
	g.Expect(live.ManagedFields).NotTo(BeEmpty())
	g.Expect(live.Annotations).To(HaveKey(corev1.LastAppliedConfigAnnotation))

	c, err := cache.New(env.Config, withScheme(controllers.CacheOptions(nil)))
	g.Expect(err).NotTo(HaveOccurred())
	// Its reads start no informer (ReaderFailOnMissingInformer): the controllers' watches do.
	_, err = c.GetInformer(ctx, &corev1.ConfigMap{})
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = c.Start(ctx) }()
	g.Expect(c.WaitForCacheSync(ctx)).To(BeTrue())
	cached := &corev1.ConfigMap{}
	g.Eventually(func() error { return c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "child"}, cached) }).Should(Succeed())
	g.Expect(cached.ManagedFields).To(BeEmpty())
	g.Expect(cached.Annotations).To(Equal(map[string]string{"kept": "yes"}))
	g.Expect(cached.Labels).To(Equal(live.Labels))
	g.Expect(cached.Data).To(Equal(map[string]string{"k": "v"}))
	g.Expect(cached.ResourceVersion).To(Equal(live.ResourceVersion))
}

func withScheme(o cache.Options) cache.Options {
	o.Scheme = envtestutil.Scheme()
	return o
}
