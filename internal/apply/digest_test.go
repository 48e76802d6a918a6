package apply

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// TestOwnedComparesDataTheCacheKeepsAsDigests: a ConfigMap cached without its data (DropData) is
// compared by the digests of its values, as contains compares the values: the rendered data held,
// nothing is sent; a value changed or a key of ours gone, applied again; a key someone added beside
// ours, left alone. Other fields are still compared.
func TestOwnedComparesDataTheCacheKeepsAsDigests(t *testing.T) {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "digest-owner"}}
	rendered := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rules", Labels: map[string]string{"alerts": "true"}},
			Data:       map[string]string{"a.rules.yaml": "groups: []\n", "empty": ""}}
	}
	for name, tc := range map[string]struct {
		onServer func(*corev1.ConfigMap)
		applied  bool
	}{
		"as rendered":             {},
		"a value changed":         {onServer: func(cm *corev1.ConfigMap) { cm.Data["a.rules.yaml"] = "groups: [x]\n" }, applied: true},
		"an empty value changed":  {onServer: func(cm *corev1.ConfigMap) { cm.Data["empty"] = "x" }, applied: true},
		"a key of ours removed":   {onServer: func(cm *corev1.ConfigMap) { delete(cm.Data, "empty") }, applied: true},
		"no data at all":          {onServer: func(cm *corev1.ConfigMap) { cm.Data = nil }, applied: true},
		"a key added by someone":  {onServer: func(cm *corev1.ConfigMap) { cm.Data["theirs"] = "x" }},
		"a label of ours changed": {onServer: func(cm *corev1.ConfigMap) { cm.Labels["alerts"] = "no" }, applied: true},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			server := rendered()
			server.UID = types.UID(name) // another object for the memo of what was applied over what
			g.Expect(controllerutil.SetControllerReference(owner, server, clientgoscheme.Scheme)).To(Succeed())
			appliedAs(t, owner, server)
			if tc.onServer != nil {
				tc.onServer(server)
			}
			api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(server).Build()
			var sent []string
			c := uncached{writes: writes{Client: api, sent: &sent}, api: api}
			cached := server.DeepCopy()
			DropData(cached)
			g.Expect(cached.Data).To(BeNil())
			g.Expect(cached.Annotations).To(HaveKey(CachedDataAnnotation))

			_, applied, err := Owned(context.Background(), c, memo, owner, rendered(), cached)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(applied).To(Equal(tc.applied))
		})
	}
}

// TestOwnedTakesNoDigestForTheData: a CachedDataAnnotation on an object that has its data (read
// from the API server) or a digest that does not parse never stands for the data.
func TestOwnedTakesNoDigestForTheData(t *testing.T) {
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "forged-owner"}}
	rendered := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rules"}, Data: map[string]string{"k": "ours"}}
	forged := func(uid types.UID, data map[string]string, annotation string) *corev1.ConfigMap {
		cm := rendered.DeepCopy()
		cm.UID = uid // another object for the memo of what was applied over what
		cm.Data = data
		cm.Annotations = map[string]string{CachedDataAnnotation: annotation}
		if err := controllerutil.SetControllerReference(owner, cm, clientgoscheme.Scheme); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	oursDigest := `{"k":"` + digest("ours") + `"}`
	for name, live := range map[string]*corev1.ConfigMap{
		"with data":         forged("1", map[string]string{"k": "theirs"}, oursDigest),
		"not a digest":      forged("2", nil, "{"),
		"a digest of other": forged("3", nil, `{"k":"`+digest("theirs")+`"}`),
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(live.DeepCopy()).Build()
			var sent []string
			c := uncached{writes: writes{Client: api, sent: &sent}, api: api}
			_, applied, err := Owned(context.Background(), c, memo, owner, rendered.DeepCopy(), live)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(applied).To(BeTrue())
		})
	}
	// Read past the cache, the annotation is dropped: the object's data is compared.
	g := NewWithT(t)
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(forged("4", nil, oursDigest)).Build()
	var sent []string
	c := uncached{writes: writes{Client: api, sent: &sent}, api: api}
	_, applied, err := Owned(context.Background(), c, memo, owner, rendered.DeepCopy(), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue())
	g.Expect(sent).To(Equal([]string{"apply"}))
}

// TestForgetDigestKeepsTheRest: ForgetDigest removes the annotation only.
func TestForgetDigestKeepsTheRest(t *testing.T) {
	g := NewWithT(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{CachedDataAnnotation: "{}", "kept": "yes"}},
		Data: map[string]string{"k": "v"}}
	ForgetDigest(cm)
	g.Expect(cm.Annotations).To(Equal(map[string]string{"kept": "yes"}))
	g.Expect(cm.Data).To(Equal(map[string]string{"k": "v"}))
	cm.Annotations = map[string]string{CachedDataAnnotation: "{}"}
	ForgetDigest(cm)
	g.Expect(cm.Annotations).To(BeNil())
}

// TestADigestAnnotationForgedOnAnotherKindHidesNoDrift: the cache forgets a CachedDataAnnotation
// written on a ConfigMap only (StripUnread); one a tenant writes on a child of another kind, with
// no data field to stand for, must not make a drifted child compare equal.
func TestADigestAnnotationForgedOnAnotherKindHidesNoDrift(t *testing.T) {
	g := NewWithT(t)
	owner := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "owner", UID: "forged-role-owner"}}
	rendered := &rbacv1.Role{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "role"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	live := rendered.DeepCopy()
	live.UID = "forged-role"
	live.Rules[0].Verbs = []string{"get", "list", "watch", "update"}
	live.Annotations = map[string]string{CachedDataAnnotation: "{}"}
	g.Expect(controllerutil.SetControllerReference(owner, live, clientgoscheme.Scheme)).To(Succeed())
	api := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(live.DeepCopy()).Build()
	var sent []string
	c := uncached{writes: writes{Client: api, sent: &sent}, api: api}
	_, applied, err := Owned(context.Background(), c, memo, owner, rendered.DeepCopy(), live)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(applied).To(BeTrue(), "the widened Role is reverted")
}
