package helm

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestLeaderElectionNamespaceIsGranted: with leaderElection.namespace set, the manager's Lease is in
// that namespace, so the Role that grants it leases and its binding are there too; else the manager
// never becomes leader and reconciles nothing.
func TestLeaderElectionNamespaceIsGranted(t *testing.T) {
	eachHelm(t, func(t *testing.T, helm string) {
		g := NewWithT(t)
		values := filepath.Join(t.TempDir(), "lease.yaml")
		g.Expect(os.WriteFile(values, []byte("leaderElection: {namespace: team-a}\n"), 0o600)).To(Succeed())
		_, objs := render(t, helm, values)
		var granted []string
		for _, u := range objs {
			if u.GetKind() != "Role" {
				continue
			}
			rules, _, _ := unstructured.NestedSlice(u.Object, "rules")
			for _, r := range rules {
				res, _, _ := unstructured.NestedStringSlice(r.(map[string]any), "resources")
				for _, x := range res {
					if x == "leases" {
						granted = append(granted, u.GetNamespace()+"/"+u.GetName())
					}
				}
			}
		}
		g.Expect(granted).To(ConsistOf("team-a/" + release + "-leader-election-role"))
		binding := find(t, objs, "RoleBinding", release+"-leader-election-rolebinding")
		g.Expect(binding.GetNamespace()).To(Equal("team-a"))
	})
}
