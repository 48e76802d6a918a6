package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// TestWatchNamespacesOverlay checks what `kubectl apply -k config/watch-namespaces` deploys: the
// manager watches exactly the namespaces its ClusterRole is bound in with RoleBindings (plus its own
// namespace, for the topic ledger); the role has no cluster-wide binding left, and the only other
// cluster-wide grant the overlay adds reads CRDs; the API server accepts all of it (a server-side
// dry run). controllers' TestTheManagerCachesNoSecretAndOnlyItsOwnChildren runs a manager with
// exactly these bindings.
func TestWatchNamespacesOverlay(t *testing.T) {
	g := NewWithT(t)
	rendered, objs := kustomize(t, filepath.Join(envtestutil.RepoRoot(), "config", "watch-namespaces"))

	dep := &appsv1.Deployment{}
	only(t, objs, "Deployment", dep)
	o := managerFlags(t, dep)
	g.Expect(o.controllers.WatchNamespaces).To(Equal([]string{"team-a", "team-b"}))
	g.Expect(o.controllers.OperatorNamespace).To(Equal(dep.Namespace))

	var boundIn []string
	for _, u := range objs {
		switch u.GetKind() {
		case "ClusterRoleBinding":
			b := &rbacv1.ClusterRoleBinding{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b)).To(Succeed())
			g.Expect(b.RoleRef.Name).NotTo(Equal("retry-operator-manager-role"), "the manager's ClusterRole is still bound cluster-wide by %s", b.Name)
		case "RoleBinding":
			b := &rbacv1.RoleBinding{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, b)).To(Succeed())
			if b.RoleRef.Name != "retry-operator-manager-role" {
				continue
			}
			g.Expect(b.RoleRef.Kind).To(Equal("ClusterRole"))
			g.Expect(b.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: dep.Spec.Template.Spec.ServiceAccountName, Namespace: dep.Namespace}}))
			boundIn = append(boundIn, b.Namespace)
		}
	}
	slices.Sort(boundIn)
	g.Expect(boundIn).To(Equal([]string{"retry-operator-system", "team-a", "team-b"}), "RoleBindings of the manager's ClusterRole")

	reads := &rbacv1.ClusterRole{}
	named(t, objs, "ClusterRole", "retry-operator-cluster-reads", reads)
	for _, r := range reads.Rules {
		g.Expect(r.Verbs).To(ConsistOf("list", "watch"), "the cluster-wide rule %+v", r)
	}
	crb := &rbacv1.ClusterRoleBinding{}
	named(t, objs, "ClusterRoleBinding", "retry-operator-cluster-reads", crb)
	g.Expect(crb.Subjects).To(Equal([]rbacv1.Subject{{Kind: "ServiceAccount", Name: dep.Spec.Template.Spec.ServiceAccountName, Namespace: dep.Namespace}}))

	testEnv := startEnv(t)
	for _, ns := range []string{"team-a", "team-b"} {
		g.Expect(testEnv.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	out, err := testEnv.Kubectl(rendered, "apply", "--server-side", "--dry-run=server", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(strings.Count(out, "(server dry run)")).To(Equal(len(objs)), out)
}
