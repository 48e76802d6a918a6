package apply

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// writes records the writes sent through it ("create", "create (dry run)", "apply").
type writes struct {
	client.Client
	sent *[]string
}

func (w writes) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	verb := "create"
	if len((&client.CreateOptions{}).ApplyOptions(opts).DryRun) > 0 {
		verb = "create (dry run)"
	}
	*w.sent = append(*w.sent, verb)
	return w.Client.Create(ctx, obj, opts...)
}

func (w writes) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	*w.sent = append(*w.sent, "apply")
	return w.Client.Apply(ctx, obj, opts...)
}

// uncached is a client that reads past its (absent) cache from api, as the manager's does.
type uncached struct {
	writes
	api client.Reader
}

func (u uncached) UncachedReader() client.Reader { return u.api }

// TestOwnedChecksAChildTheCacheDoesNotShowWithARead: a child the cache does not show (nil live) is
// read from the API server, never dry-run created: absent, it is applied; someone else's or
// nobody's, it is a conflict and left alone; ours without a field we set (the label someone
// removed), applied again; ours as we applied it (the cache not caught up yet), left as it is.
func TestOwnedChecksAChildTheCacheDoesNotShowWithARead(t *testing.T) {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "owner-uid"}}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other", UID: "other-uid"}}
	desired := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child", Labels: map[string]string{"managed": "yes"}},
			Data:       map[string]string{"k": "v"},
		}
	}
	controlledBy := func(o client.Object, mutate func(*corev1.ConfigMap)) *corev1.ConfigMap {
		cm := desired()
		if err := controllerutil.SetControllerReference(o, cm, clientgoscheme.Scheme); err != nil {
			t.Fatal(err)
		}
		if mutate != nil {
			mutate(cm)
		}
		return cm
	}
	for name, tc := range map[string]struct {
		existing *corev1.ConfigMap
		sent     []string
		applied  bool
		conflict string
	}{
		"absent":                          {sent: []string{"apply"}, applied: true},
		"another owner's":                 {existing: controlledBy(other, nil), conflict: "ConfigMap child exists and belongs to ConfigMap other: delete or rename it"},
		"nobody's":                        {existing: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child"}}, conflict: "ConfigMap child exists and is not controlled by this resource; the operator does not adopt it: delete or rename it"},
		"ours, its label removed":         {existing: controlledBy(owner, func(cm *corev1.ConfigMap) { cm.Labels = nil }), sent: []string{"apply"}, applied: true},
		"ours as applied, not cached yet": {existing: appliedAs(t, owner, controlledBy(owner, nil))},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			b := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme)
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			api := b.Build()
			var sent []string
			c := uncached{writes: writes{Client: api, sent: &sent}, api: api}
			_, applied, err := Owned(context.Background(), c, memo, owner, desired(), nil)
			if tc.conflict != "" {
				var ce *ConflictError
				g.Expect(errors.As(err, &ce)).To(BeTrue(), "a *ConflictError: %v", err)
				g.Expect(err.Error()).To(Equal(tc.conflict))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
			g.Expect(applied).To(Equal(tc.applied))
			g.Expect(sent).To(Equal(tc.sent))
			got := &corev1.ConfigMap{}
			g.Expect(api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: "child"}, got)).To(Succeed())
			if tc.conflict != "" {
				g.Expect(got.Labels).To(Equal(tc.existing.Labels), "left alone")
				g.Expect(got.OwnerReferences).To(Equal(tc.existing.OwnerReferences), "never adopted")
				return
			}
			g.Expect(got.Labels).To(HaveKeyWithValue("managed", "yes"))
			g.Expect(metav1.IsControlledBy(got, owner)).To(BeTrue())
		})
	}
}

// TestOwnedWithoutAnUncachedReaderChecksWithADryRun: a client that cannot read past its cache
// checks the name with a dry-run create before applying. (The fake client's dry run does not check
// existence; the API server's answer to a taken name, a conflict, is in the controllers' tests.)
func TestOwnedWithoutAnUncachedReaderChecksWithADryRun(t *testing.T) {
	g := NewWithT(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "owner-uid"}}
	child := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "child"}, Data: map[string]string{"k": "v"}}
	var sent []string
	c := writes{Client: fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).Build(), sent: &sent}
	_, applied, err := Owned(context.Background(), c, memo, owner, child, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())
	g.Expect(sent).To(Equal([]string{"create (dry run)", "apply"}))
}

// TestOwnedDoesNotApplyTheSameObjectTwiceOverOneVersion: a reconcile that comes before the cache has
// seen the last apply (it shows the version applied over) sends nothing; once the cache shows
// another version, that one is compared: as applied, nothing; changed by someone, applied again.
func TestOwnedDoesNotApplyTheSameObjectTwiceOverOneVersion(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "memo-owner"}}
	child := func(v string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "memo-child"}, Data: map[string]string{"k": v}}
		g.Expect(controllerutil.SetControllerReference(owner, cm, clientgoscheme.Scheme)).To(Succeed())
		return cm
	}
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(child("1")).Build()
	var sent []string
	c := uncached{writes: writes{Client: api, sent: &sent}, api: api}
	read := func() *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		g.Expect(api.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "memo-child"}, cm)).To(Succeed())
		return cm
	}
	stale := read()

	_, applied, err := Owned(ctx, c, memo, owner, child("2"), stale.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())
	_, applied, err = Owned(ctx, c, memo, owner, child("2"), stale.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse(), "the cache has not seen the apply yet")
	_, applied, err = Owned(ctx, c, memo, owner, child("3"), stale.DeepCopy())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "another object is applied")
	g.Expect(sent).To(Equal([]string{"apply", "apply"}))

	sent = nil
	_, applied, err = Owned(ctx, c, memo, owner, child("3"), read())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeFalse(), "caught up, as applied")
	drifted := read()
	drifted.Data["k"] = "someone's"
	g.Expect(api.Update(ctx, drifted)).To(Succeed())
	_, applied, err = Owned(ctx, c, memo, owner, child("3"), read())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "a change by someone else is reverted")
	g.Expect(read().Data).To(HaveKeyWithValue("k", "3"))
	g.Expect(sent).To(Equal([]string{"apply"}))
}
