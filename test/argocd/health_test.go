package argocd_test

import (
	"io/fs"
	"path"
	"testing"

	. "github.com/onsi/gomega"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/config/argocd"
)

// healthCase is one entry of a health_test.yaml, in Argo CD's format.
type healthCase struct {
	HealthStatus healthStatus `json:"healthStatus"`
	InputPath    string       `json:"inputPath"`
}

// kindCase is a case with its kind and the object it reads.
type kindCase struct {
	kind string
	healthCase
	raw []byte // the testdata object as YAML
}

// loadCases reads every kind's health_test.yaml and its testdata objects.
func loadCases(t *testing.T) map[string][]kindCase {
	t.Helper()
	kinds, err := argocd.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]kindCase{}
	for _, kind := range kinds {
		dir := path.Join(argocd.Dir, kind)
		b, err := fs.ReadFile(argocd.Scripts, path.Join(dir, "health_test.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var tests struct {
			Tests []healthCase `json:"tests"`
		}
		if err := yaml.UnmarshalStrict(b, &tests); err != nil {
			t.Fatalf("%s/health_test.yaml: %v", kind, err)
		}
		for _, c := range tests.Tests {
			raw, err := fs.ReadFile(argocd.Scripts, path.Join(dir, c.InputPath))
			if err != nil {
				t.Fatal(err)
			}
			out[kind] = append(out[kind], kindCase{kind: kind, healthCase: c, raw: raw})
		}
	}
	return out
}

// decoders give an object as Argo CD's tests decode it (YAML: numbers float64) and as its
// controller sees a live object (Kubernetes JSON: integers int64).
var decoders = map[string]func([]byte) (map[string]any, error){
	"yaml": func(b []byte) (map[string]any, error) {
		var m map[string]any
		return m, yaml.Unmarshal(b, &m)
	},
	"live": func(b []byte) (map[string]any, error) {
		j, err := yaml.YAMLToJSON(b)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		return m, utiljson.Unmarshal(j, &m)
	},
}

// TestHealthChecks runs every case of every kind's health_test.yaml against its health.lua, in
// Argo CD's built-in sandbox (every library: the expected message as written) and in its argocd-cm
// sandbox (no string library: the same status, and a message the script could not cut is whole).
func TestHealthChecks(t *testing.T) {
	cases := loadCases(t)
	for kind, cs := range cases {
		script, err := argocd.HealthScript(kind)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			for dec, decode := range decoders {
				for _, sb := range []sandbox{builtIn, configMap} {
					t.Run(kind+"/"+c.InputPath+"/"+dec+"/"+string(sb), func(t *testing.T) {
						g := NewWithT(t)
						obj, err := decode(c.raw)
						g.Expect(err).NotTo(HaveOccurred())
						got, err := runHealth(script, obj, sb)
						g.Expect(err).NotTo(HaveOccurred())
						if sb == configMap && truncated(c.HealthStatus.Message, got.Message) {
							g.Expect(got.Status).To(Equal(c.HealthStatus.Status))
							return
						}
						g.Expect(got).To(Equal(c.HealthStatus))
					})
				}
			}
		}
	}
}

// TestTestdataObjectsAreTheAPIsTypes: every testdata object decodes, with no unknown field, into
// its kind's Go type, so the cases cannot test fields the operator never writes.
func TestTestdataObjectsAreTheAPIsTypes(t *testing.T) {
	newObject := map[string]func() any{
		"RetryPolicy": func() any { return &retryv1alpha1.RetryPolicy{} }, "DeadLetterQueue": func() any { return &retryv1alpha1.DeadLetterQueue{} },
		"ConsumerPipeline": func() any { return &retryv1alpha1.ConsumerPipeline{} }, "DeadLetterAction": func() any { return &retryv1alpha1.DeadLetterAction{} },
	}
	for kind, cs := range loadCases(t) {
		for _, c := range cs {
			t.Run(kind+"/"+c.InputPath, func(t *testing.T) {
				g := NewWithT(t)
				g.Expect(newObject).To(HaveKey(kind))
				obj := newObject[kind]()
				g.Expect(yaml.UnmarshalStrict(c.raw, obj)).To(Succeed())
				g.Expect(obj).To(HaveField("Kind", kind))
			})
		}
	}
}
