package controllers_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// TestManagerRoleHasNoWildcards reads the generated ClusterRole (config/rbac/role.yaml, from the
// markers in doc.go) and fails on any "*" verb, resource, API group, resource name or non-resource
// URL, then checks it grants exactly what the controllers touch.
func TestManagerRoleHasNoWildcards(t *testing.T) {
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
	got := map[string]string{}
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
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				verbs := slices.Sorted(slices.Values(r.Verbs))
				got[g+"/"+res] = strings.Join(verbs, ",")
			}
		}
	}

	want := map[string]string{
		"retry.retryops.dev/retrypolicies":                "get,list,patch,update,watch",
		"retry.retryops.dev/deadletterqueues":             "get,list,patch,update,watch",
		"retry.retryops.dev/consumerpipelines":            "get,list,patch,update,watch",
		"retry.retryops.dev/retrypolicies/status":         "get,patch,update",
		"retry.retryops.dev/deadletterqueues/status":      "get,patch,update",
		"retry.retryops.dev/consumerpipelines/status":     "get,patch,update",
		"retry.retryops.dev/retrypolicies/finalizers":     "update",
		"retry.retryops.dev/deadletterqueues/finalizers":  "update",
		"retry.retryops.dev/consumerpipelines/finalizers": "update",
		"/secrets":                                       "get,list,watch",
		"/events":                                        "create,patch",
		"events.k8s.io/events":                           "create,patch",
		"/configmaps":                                    "create,delete,get,list,patch,watch",
		"apps/deployments":                               "create,get,list,patch,watch",
		"/serviceaccounts":                               "create,delete,get,list,patch,watch",
		"rbac.authorization.k8s.io/roles":                "create,get,list,patch,watch",
		"rbac.authorization.k8s.io/rolebindings":         "create,get,list,patch,watch",
		"monitoring.coreos.com/prometheusrules":          "create,get,list,patch,watch",
		"apiextensions.k8s.io/customresourcedefinitions": "get,list,watch",
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
}
