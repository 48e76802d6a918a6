// Package helm tests the chart charts/retry-operator with the real helm binaries, both majors
// (hack/setup-helm.sh builds them): rendered with several values files, linted, dry-run against the
// API server, compared with what config/default and config/watch-namespaces deploy, and installed,
// upgraded and uninstalled on a local control plane whose manager runs as a local process.
package helm

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// The release config/default's names and namespace come from: the chart's defaults give the same.
const (
	release   = "retry-operator"
	namespace = envtestutil.OperatorNamespace
)

var (
	chartDir   = envtestutil.RepoPath("charts", "retry-operator")
	shared     = &envtestutil.Shared{CRDDirs: func(testing.TB) []string { return []string{filepath.Join("testdata", "crds")} }, Setup: envtestutil.CreateNamespaces("team-a", "team-b", "monitoring")}
	helmOnce   sync.Once
	helmDir    string
	helmSetup  error
	helmOutput []byte
)

func TestMain(m *testing.M) { shared.Main(m) }

// helmMajors are the helm binaries the chart is tested with, by name: Helm 4 and Helm 3.
func helmMajors(t *testing.T) map[string]string {
	t.Helper()
	helmOnce.Do(func() {
		cmd := exec.Command(envtestutil.RepoPath("hack", "setup-helm.sh"), "--print-path")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		helmDir, helmSetup, helmOutput = strings.TrimSpace(string(out)), err, stderr.Bytes()
	})
	if helmSetup != nil {
		t.Fatalf("hack/setup-helm.sh: %v\n%s", helmSetup, helmOutput)
	}
	return map[string]string{"helm4": filepath.Join(helmDir, "helm"), "helm3": filepath.Join(helmDir, "helm3")}
}

// eachHelm runs f as a subtest per helm major.
func eachHelm(t *testing.T, f func(t *testing.T, helm string)) {
	majors := helmMajors(t)
	names := make([]string, 0, len(majors))
	for name := range majors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) { f(t, majors[name]) })
	}
}

// run runs a program and returns its stdout, failing the test with its stderr.
func run(t *testing.T, stdin []byte, bin string, args ...string) []byte {
	t.Helper()
	out, err := runErr(stdin, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func runErr(stdin []byte, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command(bin, args...)
	// helm's caches and configuration stay out of the user's home.
	home, err := os.MkdirTemp("", "retryops-helm-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), &runError{cmd: filepath.Base(bin) + " " + strings.Join(args, " "), err: err, stderr: stderr.String() + stdout.String()}
	}
	return stdout.Bytes(), nil
}

type runError struct {
	cmd, stderr string
	err         error
}

func (e *runError) Error() string { return e.cmd + ": " + e.err.Error() + "\n" + e.stderr }

// render is `helm template` of the chart as release in namespace with the values files.
func render(t *testing.T, helm string, values ...string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	return renderAs(t, helm, release, namespace, values...)
}

// renderAs is render with another release name and namespace.
func renderAs(t *testing.T, helm, release, namespace string, values ...string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", namespace}
	for _, v := range values {
		args = append(args, "--values", v)
	}
	out := run(t, nil, helm, args...)
	objs, err := envtestutil.DecodeObjects(out)
	if err != nil {
		t.Fatalf("decoding helm template's output: %v\n%s", err, out)
	}
	return out, objs
}

// kubectl is the envtest assets' kubectl (hack/setup-envtest.sh links or builds it).
func kubectl(t *testing.T) string {
	t.Helper()
	assets, err := envtestutil.Assets()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := envtestutil.KubectlPath(assets)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// kustomize builds the kustomization in dir with the real kubectl.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out := run(t, nil, kubectl(t), "kustomize", dir)
	objs, err := envtestutil.DecodeObjects(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find returns the object of kind and name, failing the test when there is none.
func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	t.Fatalf("no %s %s among %v", kind, name, keys(objs))
	return nil
}

// key names an object: kind namespace/name.
func key(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

func keys(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, u := range objs {
		out = append(out, key(u))
	}
	sort.Strings(out)
	return out
}
