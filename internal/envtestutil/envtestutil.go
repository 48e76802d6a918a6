// Package envtestutil starts the envtest control plane (kube-apiserver and etcd, optionally
// controller-manager) for integration tests, with this project's CRDs installed.
//
// The binaries come from KUBEBUILDER_ASSETS when it is set (as `make test` does) and otherwise from
// hack/setup-envtest.sh, which builds them from the Go module proxy the first time, so a plain
// `go test ./...` works too. A missing binary is a test failure, never a skip.
//
// Start is the plain control plane; StartAggregated adds the aggregation layer's front-proxy
// certificates and flags, for the deadletters and external metrics APIs; Shared is a test
// package's one control plane, started by the first test that needs it.
package envtestutil

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Env is a running envtest control plane.
type Env struct {
	// Environment is the underlying envtest environment.
	Environment *envtest.Environment
	// Config reaches the API server as an administrator.
	Config *rest.Config
	// Client is a direct (non-caching) client with this project's kinds registered.
	Client client.Client
	// Kubeconfig is the path of a kubeconfig file for the real kubectl.
	Kubeconfig string
	// AssetsDir holds kube-apiserver, etcd and kubectl.
	AssetsDir string

	dir string
	// extraDirs are removed by Stop too.
	extraDirs []string
}

// RepoRoot returns the root of this repository (the directory holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var (
	assetsOnce sync.Once
	assetsDir  string
	assetsErr  error
)

// Assets returns the directory holding the envtest binaries, building them if needed.
func Assets() (string, error) {
	assetsOnce.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			assetsDir = dir
			return
		}
		cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "setup-envtest.sh"), "--print-path", "--with-controller-manager")
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			assetsErr = fmt.Errorf("hack/setup-envtest.sh failed: %w", err)
			return
		}
		assetsDir = strings.TrimSpace(out.String())
	})
	return assetsDir, assetsErr
}

// Start starts kube-apiserver and etcd with this project's CRDs (and any extra CRD directories)
// installed. Call Stop when done.
func Start(extraCRDDirs ...string) (*Env, error) {
	return start(nil, extraCRDDirs...)
}

// start is Start; configure, when not nil, may set kube-apiserver flags before it starts.
func start(configure func(te *envtest.Environment) error, extraCRDDirs ...string) (*Env, error) {
	assets, err := Assets()
	if err != nil {
		return nil, err
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, fmt.Errorf("envtest binary %s missing in %s (run hack/setup-envtest.sh): %w", bin, assets, err)
		}
	}
	dirs := append([]string{filepath.Join(RepoRoot(), "config", "crd", "bases")}, extraCRDDirs...)
	te := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     dirs,
		ErrorIfCRDPathMissing: true,
	}
	if configure != nil {
		if err := configure(te); err != nil {
			return nil, err
		}
	}
	cfg, err := te.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	env := &Env{Environment: te, Config: cfg, AssetsDir: assets}
	if env.Client, err = client.New(cfg, client.Options{Scheme: Scheme()}); err != nil {
		_ = te.Stop()
		return nil, err
	}
	if err := env.writeKubeconfig(); err != nil {
		_ = te.Stop()
		return nil, err
	}
	// The manager's own namespace, as config/default installs it: it holds the topic ledger.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: OperatorNamespace}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		_ = te.Stop()
		return nil, fmt.Errorf("creating namespace %s: %w", OperatorNamespace, err)
	}
	return env, nil
}

// OperatorNamespace is the namespace Start creates for the manager (controllers'
// DefaultOperatorNamespace, where config/default installs it).
const OperatorNamespace = "retry-operator-system"

func (e *Env) writeKubeconfig() error {
	user, err := e.Environment.AddUser(envtest.User{Name: "envtest-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the envtest admin user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return err
	}
	if e.dir, err = os.MkdirTemp("", "retryops-envtest-"); err != nil {
		return err
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	return os.WriteFile(e.Kubeconfig, data, 0o600)
}

// KubectlPath is the kubectl of the envtest assets in assetsDir (hack/setup-envtest.sh links or
// builds it), else the one on PATH.
func KubectlPath(assetsDir string) (string, error) {
	bin := filepath.Join(assetsDir, "kubectl")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		return "", fmt.Errorf("no kubectl in %s nor on PATH (run hack/setup-envtest.sh)", assetsDir)
	}
	return bin, nil
}

// Kubectl runs the real kubectl against this control plane and returns its combined output.
func (e *Env) Kubectl(stdin []byte, args ...string) (string, error) {
	bin, err := KubectlPath(e.AssetsDir)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", e.Kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Stop stops the control plane and removes temporary files.
func (e *Env) Stop() error {
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
	for _, d := range e.extraDirs {
		_ = os.RemoveAll(d)
	}
	return e.Environment.Stop()
}

var (
	schemeOnce sync.Once
	testScheme *k8sruntime.Scheme
)

// Scheme returns a scheme with client-go's kinds and this project's kinds.
func Scheme() *k8sruntime.Scheme {
	schemeOnce.Do(func() {
		testScheme = k8sruntime.NewScheme()
		if err := clientgoscheme.AddToScheme(testScheme); err != nil {
			panic(err)
		}
		if err := retryv1alpha1.AddToScheme(testScheme); err != nil {
			panic(err)
		}
	})
	return testScheme
}
