// Package stored pins the names and fields the operator and the dispatchers store and read back
// that no other golden file pins: the annotations and labels on the objects the operator makes,
// the topic ledger's label, the record of decisions' names, the config file's version, and every
// field of the four CRDs (what etcd holds of each resource). A change to one of them changes what
// an earlier release left in a cluster: see docs/development.md, "Stored formats and
// compatibility", before running -update.
package stored

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/testutil/golden"
)

const hint = "go test ./test/stored (a stored format: read docs/development.md#stored-formats-and-compatibility first)"

// TestStoredNames: the names the operator reads back from what it or the dispatchers wrote.
func TestStoredNames(t *testing.T) {
	names := []struct{ what, value string }{
		{"annotation on every child: the digest of what was applied", apply.AppliedAnnotation},
		{"annotation on the pod template: the hash of the pipeline's ConfigMap", render.AnnotationConfigHash},
		{"annotation on the pipeline's ConfigMap: the Secrets the pods mount", render.AnnotationSecrets},
		{"label on a pipeline's children", render.LabelPipeline},
		{"label on a queue's alert objects", render.LabelDeadLetterQueue},
		{"label on alert rule ConfigMaps", render.LabelAlertRules},
		{"label on the topic ledger's ConfigMaps", kafkaspec.LedgerLabel},
		{"suffix of a queue's record of decisions", deadletters.StateTopicSuffix},
		{"key of a read-from record in the record of decisions", deadletters.ReadFromKey},
		{"version of the dispatcher config file", config.Version},
	}
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s: %s\n", n.what, n.value)
	}
	golden.Assert(t, "names.golden", []byte(b.String()), hint)
}

// TestCRDFields: every field of the four CRDs, by version, with its type.
func TestCRDFields(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) != 4 {
		t.Fatalf("CRDs: %v %v, want the four kinds'", files, err)
	}
	var lines []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			prefix := crd.Spec.Names.Kind + "." + v.Name
			fields(prefix, *v.Schema.OpenAPIV3Schema, func(path, typ string) { lines = append(lines, path+" "+typ) })
		}
	}
	slices.Sort(lines)
	golden.Assert(t, "crd-fields.golden", []byte(strings.Join(lines, "\n")+"\n"), hint)
}

// fields calls fn with the path and type of every property under s.
func fields(path string, s apiextensionsv1.JSONSchemaProps, fn func(path, typ string)) {
	for name, p := range s.Properties {
		sub := path + "." + name
		fn(sub, p.Type)
		fields(sub, p, fn)
	}
	if s.Items != nil && s.Items.Schema != nil {
		fields(path+"[]", *s.Items.Schema, fn)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		fields(path+"{}", *s.AdditionalProperties.Schema, fn)
	}
}
