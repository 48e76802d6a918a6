package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// managerRole reads the generated ClusterRole (config/rbac/role.yaml, from the markers in
// controllers/setup.go).
func managerRole(t *testing.T) *rbacv1.ClusterRole {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(data, role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) == 0 {
		t.Fatal("the ClusterRole has no rules")
	}
	return role
}

// asOperator is a client that acts as the operator's ServiceAccount would: impersonating a user
// bound cluster-wide to a copy of the generated ClusterRole, and to nothing else. A fresh binding
// may take a moment to reach the authorizer: callers retry their first request.
func asOperator(t *testing.T, ns string) client.Client {
	t.Helper()
	ctx := context.Background()
	role := managerRole(t)
	role.Name = ns + "-manager-role"
	if err := env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + ns + ":retry-operator"
	if err := env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-manager-rolebinding"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}); err != nil {
		t.Fatal(err)
	}
	return impersonating(t, user)
}

// impersonating is a client of the test control plane acting as user.
func impersonating(t *testing.T, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// managerRoleVerbs are the verbs the ClusterRole grants by "group/resource", sorted.
func managerRoleVerbs(t *testing.T) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for _, r := range managerRole(t).Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				got[g+"/"+res] = slices.Sorted(slices.Values(append(got[g+"/"+res], r.Verbs...)))
			}
		}
	}
	return got
}

// TestManagerRoleHasNoWildcards reads the generated ClusterRole and fails on any "*" verb,
// resource, API group, resource name or non-resource URL, then checks it grants exactly the verbs
// the code uses: the reads of the cache (list, watch) and the uncached ones (get: Secrets, the
// stored spec.template of a pipeline, the topic ledger's ConfigMaps, an object of a child's name
// the cache does not show), server-side apply (patch, and create for
// a new object and the dry-run create of a child not seen), optimistic merge patches of status,
// finalizers and annotations (patch; no update anywhere), the deletes of a ServiceAccount and of an
// alert ConfigMap replaced by a PrometheusRule, events, and update on the finalizers of the kinds
// that own children (blockOwnerDeletion). TestTheManagerCachesNoSecretAndOnlyItsOwnChildren checks
// the other way round: every request a running manager sends is granted.
func TestManagerRoleHasNoWildcards(t *testing.T) {
	role := managerRole(t)
	for i, r := range role.Rules {
		for field, values := range map[string][]string{
			"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups,
			"resourceNames": r.ResourceNames, "nonResourceURLs": r.NonResourceURLs,
		} {
			for _, v := range values {
				if strings.Contains(v, "*") {
					t.Errorf("rule %d has the wildcard %q in %s", i, v, field)
				}
			}
		}
	}
	got := map[string]string{}
	for k, v := range managerRoleVerbs(t) {
		got[k] = strings.Join(v, ",")
	}

	want := map[string]string{
		"retry.retryops.dev/retrypolicies":                "list,watch",
		"retry.retryops.dev/deadletterqueues":             "get,list,patch,watch",
		"retry.retryops.dev/consumerpipelines":            "get,list,patch,watch",
		"retry.retryops.dev/retrypolicies/status":         "patch",
		"retry.retryops.dev/deadletterqueues/status":      "patch",
		"retry.retryops.dev/consumerpipelines/status":     "patch",
		"retry.retryops.dev/deadletterqueues/finalizers":  "update",
		"retry.retryops.dev/consumerpipelines/finalizers": "update",
		"retry.retryops.dev/deadletteractions":            "list,watch",
		"retry.retryops.dev/deadletteractions/status":     "patch",
		"/secrets":                                       "get",
		"/events":                                        "create,patch",
		"events.k8s.io/events":                           "create,patch",
		"/configmaps":                                    "create,delete,get,list,patch,watch",
		"apps/deployments":                               "create,get,list,patch,watch",
		"/serviceaccounts":                               "create,delete,get,list,patch,watch",
		"rbac.authorization.k8s.io/roles":                "create,get,list,patch,watch",
		"rbac.authorization.k8s.io/rolebindings":         "create,get,list,patch,watch",
		"monitoring.coreos.com/prometheusrules":          "create,get,list,patch,watch",
		"autoscaling/horizontalpodautoscalers":           "create,delete,get,list,patch,watch",
		"keda.sh/scaledobjects":                          "create,delete,get,patch",
		"apiextensions.k8s.io/customresourcedefinitions": "list,watch",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: verbs %q, want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s (%s) is granted but no controller needs it", k, v)
		}
	}
	for _, v := range []string{"list", "watch"} {
		if strings.Contains(got["/secrets"], v) {
			t.Errorf("Secrets are never listed or watched (they are read uncached), but the ClusterRole grants %s", v)
		}
	}
}
