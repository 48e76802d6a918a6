// Package layers checks the import rules of ARCHITECTURE.md, so that the map stays true: each rule
// there that a machine can check is a case here.
package layers

import (
	"cmp"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const (
	module = "github.com/retryops/retry-operator/"
	// sdk is the data plane's module (sdk/go.mod), a module of its own inside this repository.
	sdk = module + "sdk/"
	// examples is the examples' module (examples/go.mod), which depends on the data plane's as a
	// user's consumer does.
	examples = module + "examples/"
	franz    = "github.com/twmb/franz-go/..."
)

// The modules' directories, relative to this package: go list runs in the one a package belongs to.
const (
	rootDir     = "../.."
	sdkDir      = "../../sdk"
	examplesDir = "../../examples"
)

// matches reports whether the import path d is f, or under f when f ends in /... .
func matches(d, f string) bool {
	if p, ok := strings.CutSuffix(f, "/..."); ok {
		return d == p || strings.HasPrefix(d, p+"/")
	}
	return d == f
}

// goList runs go list in the module directory dir and returns its fields.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok { //nolint:errorlint // exec returns *ExitError itself
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return strings.Fields(string(out))
}

// TestDependencies checks what each layer may depend on, transitively (test files excluded).
func TestDependencies(t *testing.T) {
	cases := []struct {
		name string
		// dir is the module directory the patterns are relative to: rootDir when empty.
		dir string
		// pkg is a package pattern relative to the module root.
		pkg string
		// forbidden are import paths no dependency may have; a path ending in /... stands for
		// the path and everything under it.
		forbidden []string
		// allowedModule, when set, are the only module packages the dependencies may include
		// (besides the package itself).
		allowedModule []string
	}{
		{
			name:          "the API types depend on apimachinery alone, no module package",
			pkg:           "./api/...",
			forbidden:     []string{"sigs.k8s.io/controller-runtime/...", franz, "k8s.io/client-go/..."},
			allowedModule: []string{},
		},
		{
			name:          "the retry core is pure: the standard library and the clock",
			dir:           sdkDir,
			pkg:           "./retry",
			forbidden:     []string{"k8s.io/apimachinery/...", "sigs.k8s.io/...", franz, "k8s.io/client-go/...", "github.com/prometheus/..."},
			allowedModule: []string{},
		},
		{
			name:      "the controllers reach Kafka only through the franz-free interface",
			pkg:       "./controllers",
			forbidden: []string{franz, module + "internal/kafka/franz", sdk + "dispatcher"},
		},
		{
			name:      "the Kafka interface and the statistics built on it are franz-free",
			pkg:       "./internal/kafka ./internal/kafkastats ./internal/kafkaspec",
			forbidden: []string{franz},
		},
		{
			name:          "the leases are the standard library alone",
			pkg:           "./internal/lease",
			forbidden:     []string{"k8s.io/...", "sigs.k8s.io/...", franz},
			allowedModule: []string{},
		},
		{
			name:      "rendering is pure: no Kafka client, no API server client",
			pkg:       "./internal/render ./internal/policy",
			forbidden: []string{franz, "sigs.k8s.io/controller-runtime/...", "k8s.io/client-go/rest", module + "internal/kafka/...", module + "controllers"},
		},
		{
			name:          "the config file and its policy are pure: the retry core, no Kafka client, no metrics",
			dir:           sdkDir,
			pkg:           "./config ./policy",
			forbidden:     []string{franz, "github.com/prometheus/..."},
			allowedModule: []string{sdk + "retry", sdk + "policy"},
		},
		{
			name:      "the dead-letter engine reaches Kafka through the interface and knows no reconciler",
			pkg:       "./internal/deadletters",
			forbidden: []string{franz, module + "internal/kafka/franz", module + "controllers", "sigs.k8s.io/controller-runtime/...", sdk + "dispatcher"},
		},
		{
			name:          "the kubectl plugin has no power of its own: the API server only, no Kafka client, no reconciler, no engine",
			pkg:           "./cmd/kubectl-dlq ./internal/dlqcli ./internal/dlqui",
			forbidden:     []string{franz, "sigs.k8s.io/controller-runtime/...", module + "internal/kafka/...", module + "controllers", module + "internal/deadletters", sdk + "dispatcher/..."},
			allowedModule: []string{module + "api/v1alpha1", module + "api/deadletters/v1alpha1", module + "internal/dlqui", module + "internal/termsafe"},
		},
		{
			name:          "the console reaches Kubernetes only through its Backend (the plugin's clients): no client-go of its own",
			pkg:           "./internal/dlqui",
			forbidden:     []string{"k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/...", franz},
			allowedModule: []string{module + "api/v1alpha1", module + "api/deadletters/v1alpha1"},
		},
		{
			name:      "the deadletters API reads Kafka through the interface and knows no reconciler",
			pkg:       "./internal/dlqapi",
			forbidden: []string{franz, module + "internal/kafka/franz", module + "controllers", sdk + "dispatcher", module + "internal/render"},
		},
		{
			name:          "the batch contract and the header names are the standard library alone, for sink authors and dead-letter readers to import",
			dir:           sdkDir,
			pkg:           "./batch ./headers",
			forbidden:     []string{"k8s.io/...", "sigs.k8s.io/...", franz, "github.com/prometheus/..."},
			allowedModule: []string{},
		},
		{
			name:          "the PromQL check knows metric names only: no client of Kubernetes or Kafka",
			pkg:           "./internal/promcheck",
			forbidden:     []string{"k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/...", franz},
			allowedModule: []string{module + "internal/opmetrics", sdk + "metrics"},
		},
		{
			name:      "the dashboard is pure: queries from the metric names and render's labels, no client",
			pkg:       "./internal/dashboard ./hack/dashboard",
			forbidden: []string{"k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/...", franz, module + "internal/kafka/...", module + "controllers", module + "internal/promcheck"},
		},
		{
			name:          "the Argo CD health checks are embedded scripts: the standard library only, gopher-lua in tests",
			pkg:           "./config/argocd/...",
			forbidden:     []string{"k8s.io/...", "sigs.k8s.io/...", franz, "github.com/yuin/gopher-lua/..."},
			allowedModule: []string{module + "config/argocd"},
		},
		{
			name:          "chartgen works from config/'s files and the values' constraints alone, no other module package",
			pkg:           "./hack/chartgen",
			forbidden:     []string{"k8s.io/client-go/...", "sigs.k8s.io/controller-runtime/...", "helm.sh/..."},
			allowedModule: []string{module + "internal/chartschema"},
		},
		{
			// Its tests hold it to the manager's checks; the package itself is data.
			name:          "the chart values' constraints are the standard library only",
			pkg:           "./internal/chartschema",
			forbidden:     []string{"k8s.io/...", "sigs.k8s.io/..."},
			allowedModule: []string{},
		},
		{
			// The data-plane module itself is checked whole by TestTheDataPlaneModuleNeedsNoKubernetes.
			name:      "the dispatcher's program and the optional Kubernetes reporting know nothing of the control plane",
			pkg:       "./pkg/... ./cmd/dispatcher",
			forbidden: []string{"sigs.k8s.io/controller-runtime/...", module + "controllers", module + "internal/kafka/...", module + "internal/render", module + "internal/kafkastats", module + "cmd/manager"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := cmp.Or(tc.dir, rootDir)
			deps := goList(t, dir, append([]string{"-deps", "-f", "{{.ImportPath}}"}, strings.Fields(tc.pkg)...)...)
			self := goList(t, dir, append([]string{"-f", "{{.ImportPath}}"}, strings.Fields(tc.pkg)...)...)
			for _, d := range deps {
				for _, f := range tc.forbidden {
					if matches(d, f) {
						t.Errorf("%s depends on %s", tc.pkg, d)
					}
				}
				if tc.allowedModule != nil && strings.HasPrefix(d, module) && !slices.Contains(self, d) && !slices.Contains(tc.allowedModule, d) {
					t.Errorf("%s depends on the module package %s", tc.pkg, d)
				}
			}
		})
	}
}

// TestImporters checks which packages of both modules may import a package directly (test files
// excluded).
func TestImporters(t *testing.T) {
	imports := map[string][]string{}
	for _, dir := range []string{rootDir, sdkDir} {
		for _, line := range goList(t, dir, "-f", "{{.ImportPath}}={{join .Imports \",\"}}", "./...") {
			pkg, list, _ := strings.Cut(line, "=")
			if list != "" {
				imports[pkg] = strings.Split(list, ",")
			}
		}
	}
	testHelpers := []string{sdk + "testutil/golden", sdk + "testutil/syncbuf", sdk + "testutil/kafkatest", sdk + "dispatcher/dispatchertest"}
	cases := []struct {
		name    string
		target  string
		allowed []string
	}{
		// internal/dlqtest is the whole server side for the plugin's and the console's tests, wired
		// as cmd/manager wires it; only tests import it (the last case).
		{"only the manager wires the controllers", module + "controllers", []string{module + "cmd/manager", module + "internal/dlqtest"}},
		{"only the manager builds franz-go admin clients", module + "internal/kafka/franz", []string{module + "cmd/manager", module + "internal/dlqtest"}},
		{"only tests start the dead-letter test stack", module + "internal/dlqtest", nil},
		{"only the programs and the library build a dispatcher", sdk + "dispatcher", []string{module + "cmd/dispatcher", sdk + "retryloop"}},
		{"the PromQL check runs in tests only (promtool), never in a program", module + "internal/promcheck", nil},
		{"only hack/dashboard writes the dashboard", module + "internal/dashboard", []string{module + "hack/dashboard"}},
		{"only the generator reads the Argo CD scripts outside tests", module + "config/argocd", []string{module + "config/argocd/gen"}},
	}
	for _, h := range testHelpers {
		cases = append(cases, struct {
			name    string
			target  string
			allowed []string
		}{"only tests use the test helper " + h, h, nil})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for pkg, list := range imports {
				if slices.Contains(list, tc.target) && !slices.Contains(tc.allowed, pkg) {
					t.Errorf("%s imports %s; only %v may", pkg, tc.target, tc.allowed)
				}
			}
		})
	}
	// No library code imports a program, a test harness or a script.
	for pkg, list := range imports {
		if !strings.HasPrefix(pkg, module+"internal/") && !strings.HasPrefix(pkg, module+"pkg/") && !strings.HasPrefix(pkg, module+"controllers") && !strings.HasPrefix(pkg, module+"api/") && !strings.HasPrefix(pkg, sdk) {
			continue
		}
		for _, imp := range list {
			for _, p := range []string{"cmd/", "test/", "hack/"} {
				if strings.HasPrefix(imp, module+p) {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
}
