package helm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// rbacKinds are the objects that decide what the manager's ServiceAccount may do.
var rbacKinds = map[string]bool{"ServiceAccount": true, "ClusterRole": true, "Role": true, "ClusterRoleBinding": true, "RoleBinding": true}

// TestTheManagersServiceAccountMayServeTheAPIs applies the RBAC of each way to install the manager
// (config/default, config/watch-namespaces, the chart's defaults and its watchNamespaces) and asks
// the API server (SubjectAccessReviews) whether the manager's ServiceAccount may do what the
// deadletters and external metrics APIs need to start and serve, whatever it watches: read
// kube-system/extension-apiserver-authentication (delegated authentication: get at start, then
// list and watch), create TokenReviews and SubjectAccessReviews (delegated authentication and
// authorization), patch its APIServices and keep its serving certificate's Secret.
func TestTheManagersServiceAccountMayServeTheAPIs(t *testing.T) {
	env := shared.Env(t)
	watch := filepath.Join(t.TempDir(), "watch.yaml")
	if err := os.WriteFile(watch, []byte("watchNamespaces: [team-a, team-b]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// namespace is the manager's: config/'s own is renamed so that the cases' grants stay apart.
		namespace string
		objects   func(t *testing.T) []*unstructured.Unstructured
	}{
		{"config/default", "rbac-default", func(t *testing.T) []*unstructured.Unstructured {
			return renamed(t, kubectlKustomize(t, envtestutil.RepoPath("config", "default")), "rbac-default")
		}},
		{"config/watch-namespaces", "rbac-watch", func(t *testing.T) []*unstructured.Unstructured {
			return renamed(t, kubectlKustomize(t, envtestutil.RepoPath("config", "watch-namespaces")), "rbac-watch")
		}},
		{"the chart's defaults", "rbac-chart", func(t *testing.T) []*unstructured.Unstructured {
			_, objs := renderAs(t, helmMajors(t)["helm4"], "rbac-chart", "rbac-chart")
			return objs
		}},
		{"the chart's watchNamespaces", "rbac-chart-watch", func(t *testing.T) []*unstructured.Unstructured {
			_, objs := renderAs(t, helmMajors(t)["helm4"], "rbac-chart-watch", "rbac-chart-watch", watch)
			return objs
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tc.namespace}}
			g.Expect(env.Client.Create(ctx, ns)).To(Succeed())
			t.Cleanup(func() { _ = env.Client.Delete(ctx, ns) })
			var sa string
			for _, u := range tc.objects(t) {
				if !rbacKinds[u.GetKind()] {
					continue
				}
				if u.GetKind() == "ServiceAccount" {
					g.Expect(u.GetNamespace()).To(Equal(tc.namespace))
					sa = u.GetName()
				}
				g.Expect(env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("test"), client.ForceOwnership)).To(Succeed(), key(u))
				t.Cleanup(func() { _ = env.Client.Delete(ctx, u) })
			}
			g.Expect(sa).NotTo(BeEmpty(), "no ServiceAccount")
			user := "system:serviceaccount:" + tc.namespace + ":" + sa
			groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + tc.namespace, "system:authenticated"}
			for _, a := range []authorizationv1.ResourceAttributes{
				{Namespace: "kube-system", Verb: "get", Resource: "configmaps", Name: "extension-apiserver-authentication"},
				{Namespace: "kube-system", Verb: "list", Resource: "configmaps", Name: "extension-apiserver-authentication"},
				{Namespace: "kube-system", Verb: "watch", Resource: "configmaps", Name: "extension-apiserver-authentication"},
				{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"},
				{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"},
				{Verb: "patch", Group: "apiregistration.k8s.io", Resource: "apiservices", Name: "v1alpha1.deadletters.retryops.dev"},
				{Verb: "patch", Group: "apiregistration.k8s.io", Resource: "apiservices", Name: "v1beta1.external.metrics.k8s.io"},
				{Namespace: tc.namespace, Verb: "create", Resource: "secrets"},
				{Namespace: tc.namespace, Verb: "get", Resource: "secrets", Name: "retry-operator-deadletters-api-tls"},
			} {
				sar := func() (bool, error) {
					r := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a}}
					err := env.Client.Create(ctx, r)
					return r.Status.Allowed, err
				}
				// RBAC reaches the authorizer through its informers: wait for it.
				g.Eventually(sar).WithTimeout(10*time.Second).WithPolling(100*time.Millisecond).Should(BeTrue(),
					"%s may not %s %s %s/%s", user, a.Verb, a.Resource, a.Namespace, a.Name)
			}
		})
	}
}

// kubectlKustomize is kustomize's rendering of dir, as YAML.
func kubectlKustomize(t *testing.T, dir string) []byte {
	t.Helper()
	return run(t, nil, kubectl(t), "kustomize", dir)
}

// renamed decodes config/'s rendering with the manager's namespace retry-operator-system renamed.
func renamed(t *testing.T, rendered []byte, namespace string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := envtestutil.DecodeObjects([]byte(strings.ReplaceAll(string(rendered), "retry-operator-system", namespace)))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
