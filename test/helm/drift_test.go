package helm

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// helmLabels are the labels Helm charts add by convention (the release, the chart's version,
// Helm): left out of the comparison, in labels and selectors alike.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by"}

// TestChartDeploysWhatKustomizeDeploys renders the chart with its defaults, with watchNamespaces,
// and with its opt-in parts, and the matching kustomize bases (config/default, with the
// NetworkPolicy its comment offers; config/watch-namespaces; config/external-metrics), and compares
// the objects: the same kinds, names and namespaces, and the same content. The allowed differences:
//   - the chart creates no Namespace: `helm install --create-namespace` does, as Helm's convention is;
//   - the chart's labels: kustomize's are a subset of each object's (and pod template's) labels, and
//     the labels of helmLabels are left out of selectors;
//   - helm.sh/resource-policy: keep on the CRDs (crds.keep);
//   - kustomize sets a namespace on the admission policies and their bindings, which are
//     cluster-scoped (its list of cluster-scoped kinds lacks them); the API server ignores it.
func TestChartDeploysWhatKustomizeDeploys(t *testing.T) {
	values := func(name, text string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name   string
		bases  []string
		values []string
	}{
		{"defaults and config/default", []string{envtestutil.RepoPath("config", "default")}, nil},
		{"watchNamespaces and config/watch-namespaces", []string{envtestutil.RepoPath("config", "watch-namespaces")},
			[]string{values("watch.yaml", "watchNamespaces: [team-a, team-b]\n")}},
		{"networkPolicy and externalMetrics and config/network-policy and config/external-metrics",
			[]string{withNetworkPolicy(t), envtestutil.RepoPath("config", "external-metrics")},
			[]string{values("opt-in.yaml", "metrics: {networkPolicy: {enabled: true}}\nexternalMetrics: {enabled: true}\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachHelm(t, func(t *testing.T, helm string) {
				_, chartObjs := render(t, helm, tc.values...)
				var kustomized []*unstructured.Unstructured
				for _, base := range tc.bases {
					kustomized = append(kustomized, kustomize(t, base)...)
				}
				var want []*unstructured.Unstructured
				for _, u := range kustomized {
					switch u.GetKind() {
					case "Namespace":
						continue
					case "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
						u.SetNamespace("")
					}
					want = append(want, u)
				}
				NewWithT(t).Expect(keys(chartObjs)).To(Equal(keys(want)), "the chart's objects and %v's", tc.bases)
				got := map[string]*unstructured.Unstructured{}
				for _, u := range chartObjs {
					got[key(u)] = u
				}
				for _, w := range want {
					compare(t, w, got[key(w)])
				}
			})
		})
	}
}

// compare fails the test when the chart's object c differs from kustomize's k beyond the allowed
// differences.
func compare(t *testing.T, k, c *unstructured.Unstructured) {
	t.Helper()
	k, c = k.DeepCopy(), c.DeepCopy()
	for _, path := range [][]string{{"metadata"}, {"spec", "template", "metadata"}} {
		kl, _, _ := unstructured.NestedStringMap(k.Object, append(path, "labels")...)
		cl, _, _ := unstructured.NestedStringMap(c.Object, append(path, "labels")...)
		for name, v := range kl {
			if cl[name] != v {
				t.Errorf("%s: label %s=%q at %v, the chart's %q", key(k), name, v, path, cl[name])
			}
		}
		unstructured.RemoveNestedField(k.Object, append(path, "labels")...)
		unstructured.RemoveNestedField(c.Object, append(path, "labels")...)
	}
	if ann := c.GetAnnotations(); ann != nil {
		delete(ann, "helm.sh/resource-policy")
		c.SetAnnotations(ann)
		if len(ann) == 0 {
			unstructured.RemoveNestedField(c.Object, "metadata", "annotations")
		}
	}
	for _, sel := range [][]string{{"spec", "selector", "matchLabels"}, {"spec", "selector"}, {"spec", "podSelector", "matchLabels"}} {
		m, found, err := unstructured.NestedStringMap(c.Object, sel...)
		if !found || err != nil {
			continue
		}
		m = maps.Clone(m)
		for _, l := range helmLabels {
			delete(m, l)
		}
		if err := unstructured.SetNestedStringMap(c.Object, m, sel...); err != nil {
			t.Fatal(err)
		}
	}
	// As YAML, so that a difference shows where it is.
	kYAML, err := yaml.Marshal(k.Object)
	if err != nil {
		t.Fatal(err)
	}
	cYAML, err := yaml.Marshal(c.Object)
	if err != nil {
		t.Fatal(err)
	}
	if string(cYAML) != string(kYAML) {
		t.Errorf("%s: the chart's object differs from kustomize's:\n%s", key(k), firstDifference(string(kYAML), string(cYAML)))
	}
}

// firstDifference shows the lines around the first line where a and b differ.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	i := 0
	for i < len(al) && i < len(bl) && al[i] == bl[i] {
		i++
	}
	from := max(0, i-6)
	return "kustomize:\n" + strings.Join(al[from:min(len(al), i+3)], "\n") + "\nchart:\n" + strings.Join(bl[from:min(len(bl), i+3)], "\n")
}

// withNetworkPolicy copies config/ into a temporary directory with the commented `#- ../network-policy`
// of config/default/kustomization.yaml uncommented, as its comment tells a user to do, and returns
// the copy's config/default.
func withNetworkPolicy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "config")
	if err := os.CopyFS(dst, os.DirFS(envtestutil.RepoPath("config"))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dst, "default", "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const commented = "\n#- ../network-policy\n"
	if !strings.Contains(string(data), commented) {
		t.Fatalf("config/default/kustomization.yaml no longer has the commented `#- ../network-policy`:\n%s", data)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), commented, "\n- ../network-policy\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dst, "default")
}
