package render_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
)

// The config file is the contract between the operator and the data plane (the sdk module, which
// may be older or newer than the operator): these tests hold the two to it.

// contractCases are every pipeline the render tests build.
func contractCases() []struct {
	name   string
	inputs func(*testing.T) *render.Inputs
} {
	return append(slices.Clone(allCases), struct {
		name   string
		inputs func(*testing.T) *render.Inputs
	}{"sink mode on a default connection with TLS and SASL", securedDefaultInputs})
}

// TestTheDataPlaneReadsWhatTheOperatorRenders: every config the operator renders carries the
// version this module writes, and the data plane reads and validates it: through Load, with the
// seed-style environment variables a template-mode pod takes from the same ConfigMap, when the
// config names no Secret file (which exists only in the pod); through Parse and Validate otherwise.
func TestTheDataPlaneReadsWhatTheOperatorRenders(t *testing.T) {
	for _, tc := range contractCases() {
		t.Run(tc.name, func(t *testing.T) {
			cm := mustConfigMap(t, tc.inputs(t))
			data := cm.Data[render.ConfigKey]
			var head struct {
				Version *string `json:"version"`
			}
			if err := json.Unmarshal([]byte(data), &head); err != nil {
				t.Fatal(err)
			}
			if head.Version == nil || *head.Version != config.Version {
				t.Errorf("the rendered config's version is %v, want %q", head.Version, config.Version)
			}
			if cm.Annotations[render.AnnotationSecrets] != "" {
				validConfig(t, tc.inputs(t))
				return
			}
			path := filepath.Join(t.TempDir(), render.ConfigKey)
			if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := config.Load(path, func(k string) string { return cm.Data[k] }); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestANewerMinorVersionIsReadUnlessItHasFieldsThisModuleDoesNotKnow: a config the operator rendered,
// marked as of the next minor version, is read as long as every field is one this module knows; with
// fields it does not know it is refused, naming them, the file's version and this module's.
func TestANewerMinorVersionIsReadUnlessItHasFieldsThisModuleDoesNotKnow(t *testing.T) {
	major, minor, _ := strings.Cut(config.Version, ".")
	n, err := strconv.Atoi(minor)
	if err != nil {
		t.Fatal(err)
	}
	next := major + "." + strconv.Itoa(n+1)
	rendered := func(t *testing.T, edit func(map[string]any)) []byte {
		var doc map[string]any
		if err := json.Unmarshal([]byte(mustConfigMap(t, sinkRefSecretsInputs(t)).Data[render.ConfigKey]), &doc); err != nil {
			t.Fatal(err)
		}
		doc["version"] = next
		edit(doc)
		data, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}

	c, err := config.Parse(rendered(t, func(map[string]any) {}))
	if err != nil {
		t.Fatalf("a newer minor with only known fields is refused: %v", err)
	}
	if c.Version != next {
		t.Errorf("version %q, want the file's %q", c.Version, next)
	}

	_, err = config.Parse(rendered(t, func(doc map[string]any) {
		doc["delivery"].(map[string]any)["priority"] = "High"
		doc["tracing"] = map[string]any{"endpoint": "otel:4317"}
		doc["topics"].(map[string]any)["retries"].([]any)[0].(map[string]any)["partitions"] = 6
	}))
	want := fmt.Sprintf("config version %s is newer than this module's %s and has fields it does not know: "+
		"delivery.priority, topics.retries[0].partitions, tracing; upgrade github.com/retryops/retry-operator/sdk to one that reads %s",
		next, config.Version, next)
	if err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
	if !errors.Is(err, config.ErrUnsupportedVersion) {
		t.Errorf("not ErrUnsupportedVersion: %v", err)
	}
}

// TestTheCRDAndTheDataPlaneHaveTheSameEnums: each enum the operator copies from a resource into the
// config has the same values in the API (its constants and its CRD's Enum marker) and in the sdk
// (its constants), read from the sources since Go cannot list a type's constants.
func TestTheCRDAndTheDataPlaneHaveTheSameEnums(t *testing.T) {
	root := envtestutil.RepoRoot()
	api := enumsOf(t, filepath.Join(root, "api", "v1alpha1"))
	sdk := map[string]enum{}
	for _, dir := range []string{"config", "policy"} {
		maps.Copy(sdk, enumsOf(t, filepath.Join(root, "sdk", dir)))
	}
	for _, name := range []string{"SASLMechanism", "DeliveryOrdering", "RetryTopicNaming", // sdk/config
		"JitterMode", "CapPlacement", "ClassificationAction", "RetryAfterMode"} { // sdk/policy
		a, s := api[name], sdk[name]
		if len(a.consts) == 0 || len(s.consts) == 0 {
			t.Errorf("%s: no constants (API %v, sdk %v)", name, a.consts, s.consts)
			continue
		}
		if !slices.Equal(a.consts, a.marker) {
			t.Errorf("%s: the API's constants %v are not its CRD's Enum %v", name, a.consts, a.marker)
		}
		if !slices.Equal(a.consts, s.consts) {
			t.Errorf("%s: the API has %v, the sdk %v", name, a.consts, s.consts)
		}
	}
	// DefaultAction has no constants of its own: its values are ClassificationAction's.
	for _, v := range api["DefaultAction"].marker {
		if !slices.Contains(sdk["ClassificationAction"].consts, v) {
			t.Errorf("DefaultAction %s of the CRD is no action of the sdk's %v", v, sdk["ClassificationAction"].consts)
		}
	}
}

type enum struct{ consts, marker []string }

// enumsOf reads the string constants of each named type declared in dir (tests left out), and the
// kubebuilder Enum marker of its declaration, both sorted.
func enumsOf(t *testing.T, dir string) map[string]enum {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	out := map[string]enum{}
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					doc := s.Doc
					if doc == nil {
						doc = gd.Doc
					}
					if doc == nil {
						continue
					}
					for _, c := range doc.List {
						if _, vals, ok := strings.Cut(c.Text, "+kubebuilder:validation:Enum="); ok {
							e := out[s.Name.Name]
							e.marker = append(e.marker, strings.Split(strings.TrimSpace(vals), ";")...)
							slices.Sort(e.marker)
							out[s.Name.Name] = e
						}
					}
				case *ast.ValueSpec:
					typ, ok := s.Type.(*ast.Ident)
					if gd.Tok != token.CONST || !ok {
						continue
					}
					for _, v := range s.Values {
						lit, ok := v.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						val, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						e := out[typ.Name]
						e.consts = append(e.consts, val)
						slices.Sort(e.consts)
						out[typ.Name] = e
					}
				}
			}
		}
	}
	return out
}
