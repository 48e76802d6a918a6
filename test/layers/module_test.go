package layers

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The data-plane module (sdk/) is what a team's own consumer imports in library mode: franz-go, the
// Prometheus client and the standard library, and of Kubernetes only the clock interface. A
// dependency on client-go, apimachinery or controller-runtime would come back into every consumer.

// kubeAllowed are the only Kubernetes packages the data-plane module may depend on, tests included
// (clock/testing is the fake clock its tests step).
var kubeAllowed = []string{"k8s.io/utils/clock/..."}

// moduleBoundaryViolations returns the dependencies of the data-plane module that cross its
// boundary: a Kubernetes package other than kubeAllowed, or a package of the operator's module. deps
// are go list -deps -test import paths ("p [p.test]" for a test variant).
func moduleBoundaryViolations(deps []string) []string {
	var out []string
	for _, d := range deps {
		d, _, _ = strings.Cut(d, " ")
		kube := strings.HasPrefix(d, "k8s.io/") || matches(d, "sigs.k8s.io/...")
		allowed := slices.ContainsFunc(kubeAllowed, func(f string) bool { return matches(d, f) })
		operator := strings.HasPrefix(d, module) && !strings.HasPrefix(d, sdk)
		if (kube && !allowed) || operator {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestTheDataPlaneModuleNeedsNoKubernetes fails when a package of sdk/, its tests included, depends
// on Kubernetes beyond the clock or on the operator's module.
func TestTheDataPlaneModuleNeedsNoKubernetes(t *testing.T) {
	deps := goList(t, sdkDir, "-deps", "-test", "-f", "{{.ImportPath}}", "./...")
	// -f prints "p [p.test]" as two fields: the bracketed one is the test binary, not a dependency.
	deps = slices.DeleteFunc(deps, func(d string) bool { return strings.HasPrefix(d, "[") })
	for _, d := range moduleBoundaryViolations(deps) {
		t.Errorf("the data-plane module depends on %s: only the standard library, franz-go, the Prometheus client and %v", d, kubeAllowed)
	}
}

// TestTheExamplesNeedNoKubernetes fails when the examples' consumer, as a user builds it against the
// data-plane module alone, depends on Kubernetes beyond the clock or on the operator's module: what
// the examples show is what a team's consumer gets.
func TestTheExamplesNeedNoKubernetes(t *testing.T) {
	deps := goList(t, examplesDir, "-deps", "-test", "-f", "{{.ImportPath}}", "./...")
	deps = slices.DeleteFunc(deps, func(d string) bool {
		return strings.HasPrefix(d, "[") || strings.HasPrefix(d, examples)
	})
	if !slices.Contains(deps, sdk+"retryloop") {
		t.Fatalf("the examples do not depend on %sretryloop: the check would prove nothing", sdk)
	}
	for _, d := range moduleBoundaryViolations(deps) {
		t.Errorf("the examples depend on %s: only the data-plane module, franz-go, the Prometheus client and %v", d, kubeAllowed)
	}
}

// TestModuleBoundaryViolationsAreFound: the check finds client-go, apimachinery, controller-runtime,
// another k8s.io/utils package and an operator package, in test variants too, and passes the clock,
// the sdk's own packages and third parties.
func TestModuleBoundaryViolationsAreFound(t *testing.T) {
	got := moduleBoundaryViolations([]string{
		"k8s.io/utils/clock",
		"k8s.io/utils/clock/testing",
		sdk + "retry",
		sdk + "retry [" + sdk + "retry.test]",
		"github.com/twmb/franz-go/pkg/kgo",
		"k8s.io/utils/ptr",
		"k8s.io/client-go/rest",
		"k8s.io/apimachinery/pkg/apis/meta/v1 [" + sdk + "config.test]",
		"k8s.io/api/core/v1",
		"sigs.k8s.io/controller-runtime/pkg/client",
		module + "internal/policy",
		module + "sdkextra",
	})
	want := []string{
		module + "internal/policy",
		module + "sdkextra",
		"k8s.io/api/core/v1",
		"k8s.io/apimachinery/pkg/apis/meta/v1",
		"k8s.io/client-go/rest",
		"k8s.io/utils/ptr",
		"sigs.k8s.io/controller-runtime/pkg/client",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// goMod is what go mod edit -json prints of a go.mod.
type goMod struct {
	Module  struct{ Path string }
	Require []struct{ Path string }
	Replace []struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}
}

func readGoMod(t *testing.T, dir string) goMod {
	t.Helper()
	cmd := exec.Command("go", "mod", "edit", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json in %s: %v", dir, err)
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// goModViolations returns what breaks the two go.mod files' contract: the data plane's requires
// nothing of k8s.io but k8s.io/utils, nothing of sigs.k8s.io, and replaces nothing (a consumer's
// build ignores its replaces, so tests would run what no consumer gets); the operator's requires the
// data plane's and replaces it with ./sdk, so that both build from one checkout.
func goModViolations(sdkMod, rootMod goMod) []string {
	var out []string
	if sdkMod.Module.Path != strings.TrimSuffix(sdk, "/") {
		out = append(out, "sdk/go.mod declares the module "+sdkMod.Module.Path)
	}
	for _, r := range sdkMod.Require {
		if (strings.HasPrefix(r.Path, "k8s.io/") && r.Path != "k8s.io/utils") || matches(r.Path, "sigs.k8s.io/...") {
			out = append(out, "sdk/go.mod requires "+r.Path)
		}
	}
	for _, r := range sdkMod.Replace {
		out = append(out, "sdk/go.mod replaces "+r.Old.Path)
	}
	if !slices.ContainsFunc(rootMod.Require, func(r struct{ Path string }) bool { return r.Path == sdkMod.Module.Path }) {
		out = append(out, "go.mod does not require "+sdkMod.Module.Path)
	}
	replaced := slices.ContainsFunc(rootMod.Replace, func(r struct {
		Old struct{ Path string }
		New struct{ Path, Version string }
	}) bool {
		return r.Old.Path == sdkMod.Module.Path && r.New.Path == "./sdk" && r.New.Version == ""
	})
	if !replaced {
		out = append(out, "go.mod does not replace "+sdkMod.Module.Path+" with ./sdk")
	}
	return out
}

// TestTheModulesGoModKeepTheBoundary fails when sdk/go.mod requires Kubernetes beyond k8s.io/utils or
// replaces a module, or when the operator's go.mod stops building against ./sdk.
func TestTheModulesGoModKeepTheBoundary(t *testing.T) {
	for _, v := range goModViolations(readGoMod(t, sdkDir), readGoMod(t, rootDir)) {
		t.Error(v)
	}
}

// TestGoModViolationsAreFound: a Kubernetes or controller-runtime require, a replace in sdk/go.mod
// and a root go.mod without the replace are each found; the repository's own layout passes.
func TestGoModViolationsAreFound(t *testing.T) {
	var good, bad goMod
	for _, src := range []struct {
		m    *goMod
		text string
	}{
		{&good, `{"Module":{"Path":"github.com/retryops/retry-operator/sdk"},"Require":[{"Path":"k8s.io/utils"},{"Path":"github.com/twmb/franz-go"}]}`},
		{&bad, `{"Module":{"Path":"github.com/retryops/retry-operator/sdk"},"Require":[{"Path":"k8s.io/client-go"},{"Path":"sigs.k8s.io/yaml"}],
			"Replace":[{"Old":{"Path":"github.com/twmb/franz-go"},"New":{"Path":"../franz-go"}}]}`},
	} {
		if err := json.Unmarshal([]byte(src.text), src.m); err != nil {
			t.Fatal(err)
		}
	}
	var root, unreplaced goMod
	if err := json.Unmarshal([]byte(`{"Require":[{"Path":"github.com/retryops/retry-operator/sdk"}],
		"Replace":[{"Old":{"Path":"github.com/retryops/retry-operator/sdk"},"New":{"Path":"./sdk"}}]}`), &root); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"Require":[{"Path":"github.com/retryops/retry-operator/sdk"}]}`), &unreplaced); err != nil {
		t.Fatal(err)
	}
	if got := goModViolations(good, root); len(got) != 0 {
		t.Errorf("the layout as it should be: found %q", got)
	}
	want := []string{"sdk/go.mod requires k8s.io/client-go", "sdk/go.mod requires sigs.k8s.io/yaml", "sdk/go.mod replaces github.com/twmb/franz-go",
		"go.mod does not replace github.com/retryops/retry-operator/sdk with ./sdk"}
	if got := goModViolations(bad, unreplaced); !slices.Equal(got, want) {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
