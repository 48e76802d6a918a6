package apply

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

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
