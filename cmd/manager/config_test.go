package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// kubectlBin is the kubectl of the envtest assets (hack/setup-envtest.sh), else the one on PATH.
func kubectlBin(t *testing.T) string {
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

// withNetworkPolicy copies config/ into a temporary directory with the commented
// `#- ../network-policy` of config/default/kustomization.yaml uncommented, as its comment tells a
// user to do.
func withNetworkPolicy(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "config")
	if out, err := exec.Command("cp", "-r", filepath.Join(envtestutil.RepoRoot(), "config"), dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	path := filepath.Join(dst, "default", "kustomization.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte("\n#- ../network-policy\n")) {
		t.Fatalf("config/default/kustomization.yaml no longer has the commented `#- ../network-policy`:\n%s", data)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte("\n#- ../network-policy\n"), []byte("\n- ../network-policy\n"), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dst, "default")
}

// kustomize builds dir and returns its YAML and objects.
func kustomize(t *testing.T, dir string) ([]byte, []*unstructured.Unstructured) {
	t.Helper()
	out, err := exec.Command(kubectlBin(t), "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return out, objs
}

// only converts the one object of kind into out.
// named converts the object of kind and name in objs into out, failing unless there is one.
func named(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			if uo, ok := out.(*unstructured.Unstructured); ok {
				uo.Object = u.Object
				return
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no %s %s", kind, name)
}

func only(t *testing.T, objs []*unstructured.Unstructured, kind string, out any) {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, u := range objs {
		if u.GetKind() == kind {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d objects of kind %s, want 1", len(found), kind)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, out); err != nil {
		t.Fatal(err)
	}
}

// managerFlags parses the manager container's arguments, $(VAR) expanded from its env as the
// kubelet does, as the manager would.
func managerFlags(t *testing.T, dep *appsv1.Deployment) *options {
	t.Helper()
	c := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = envRef.ReplaceAllStringFunc(a, func(ref string) string {
			v, ok := env[envRef.FindStringSubmatch(ref)[1]]
			if !ok {
				t.Fatalf("%s refers to an undefined variable", a)
			}
			return v
		})
	}
	o, err := parseFlags(flag.NewFlagSet("manager", flag.ContinueOnError), args)
	if err != nil {
		t.Fatalf("the manager's arguments %v: %v", args, err)
	}
	return o
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestDeployedManager checks what `kubectl apply -k config/default` deploys, with the documented
// NetworkPolicy enabled: the manager's arguments are valid flags that serve metrics securely on
// :8443 and pass the `images` entry of the dispatcher as --dispatcher-image; no image is untagged or
// :latest; the metrics Service and the NetworkPolicy reach the manager's pod on its metrics port;
// and the API server accepts every object (a server-side dry run in envtest).
func TestDeployedManager(t *testing.T) {
	g := NewWithT(t)
	rendered, objs := kustomize(t, withNetworkPolicy(t))

	dep := &appsv1.Deployment{}
	only(t, objs, "Deployment", dep)
	g.Expect(dep.Spec.Template.Spec.Containers).To(HaveLen(1))
	c := dep.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	o := managerFlags(t, dep)
	g.Expect(o.metricsAddr).To(Equal(":8443"))
	g.Expect(o.metricsSecure).To(BeTrue(), "metrics served without authentication")
	g.Expect(metricsOptions(o).FilterProvider).NotTo(BeNil())
	g.Expect(o.controllers.DispatcherImage).To(Equal("ghcr.io/retryops/retry-dispatcher:v0.1.0"), "--dispatcher-image from the images entry")
	for _, image := range []string{c.Image, o.controllers.DispatcherImage} {
		g.Expect(image).To(MatchRegexp(`^[^:@]+(:[^:/@]+|@sha256:[0-9a-f]{64})$`), "untagged image")
		g.Expect(image).NotTo(HaveSuffix(":latest"))
	}
	g.Expect(string(rendered)).NotTo(ContainSubstring(":latest"))
	// GOMEMLIMIT is 90% of the memory limit, in bytes.
	memLimit := c.Resources.Limits.Memory()
	g.Expect(memLimit.IsZero()).To(BeFalse(), "the manager has no memory limit")
	g.Expect(env).To(HaveKeyWithValue("GOMEMLIMIT", strconv.FormatInt(memLimit.Value()*9/10, 10)))
	g.Expect(c.Ports).To(ContainElement(corev1.ContainerPort{Name: "https", ContainerPort: 8443}))
	podLabels := labels.Set(dep.Spec.Template.Labels)

	g.Expect(c.Ports).To(ContainElement(corev1.ContainerPort{Name: "deadletters-api", ContainerPort: 8444}))
	g.Expect(o.deadLettersAPI.bindAddress).To(Equal(":8444"), "the deadletters API served on every replica")

	svc := &corev1.Service{}
	named(t, objs, "Service", "retry-operator-controller-manager-metrics-service", svc)
	g.Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels)).To(BeTrue(), "the metrics Service selects %v", svc.Spec.Selector)
	// The deadletters API: its Service selects the manager's pods on 8444, and the APIService names it.
	api := &corev1.Service{}
	named(t, objs, "Service", o.deadLettersAPI.service, api)
	g.Expect(api.Namespace).To(Equal(dep.Namespace))
	g.Expect(labels.SelectorFromSet(api.Spec.Selector).Matches(podLabels)).To(BeTrue(), "the deadletters API Service selects %v", api.Spec.Selector)
	g.Expect(api.Spec.Ports).To(HaveLen(1))
	g.Expect(api.Spec.Ports[0].TargetPort.String()).To(Equal("deadletters-api"))
	apiService := &unstructured.Unstructured{}
	named(t, objs, "APIService", o.deadLettersAPI.apiService, apiService)
	ref, _, _ := unstructured.NestedMap(apiService.Object, "spec", "service")
	g.Expect(ref).To(Equal(map[string]any{"name": api.Name, "namespace": api.Namespace, "port": float64(api.Spec.Ports[0].Port)}))
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	g.Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(8443))
	g.Expect(svc.Spec.Ports[0].TargetPort.IntValue()).To(Equal(8443))

	np := &networkingv1.NetworkPolicy{}
	only(t, objs, "NetworkPolicy", np)
	g.Expect(np.Namespace).To(Equal(dep.Namespace))
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sel.Matches(podLabels)).To(BeTrue(), "the NetworkPolicy selects %v", np.Spec.PodSelector)
	g.Expect(np.Spec.Ingress).To(HaveLen(2))
	// The second rule lets the kube-apiserver reach the deadletters API, from any address.
	g.Expect(np.Spec.Ingress[1].From).To(BeEmpty())
	g.Expect(np.Spec.Ingress[1].Ports).To(HaveLen(1))
	g.Expect(np.Spec.Ingress[1].Ports[0].Port.IntValue()).To(Equal(8444))
	g.Expect(np.Spec.Ingress[0].Ports).To(HaveLen(1))
	g.Expect(np.Spec.Ingress[0].Ports[0].Port.IntValue()).To(Equal(8443))
	g.Expect(np.Spec.Ingress[0].From).To(HaveLen(1))
	g.Expect(np.Spec.Ingress[0].From[0].PodSelector).To(BeNil())
	g.Expect(np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels).To(Equal(map[string]string{"metrics": "enabled"}))

	// The API server accepts all of it (CRDs, RBAC, Namespace, Deployment, Service, NetworkPolicy).
	testEnv := startEnv(t)
	g.Expect(dep.Namespace).To(Equal(envtestutil.OperatorNamespace), "envtestutil.Start creates the manager's namespace")
	out, err := testEnv.Kubectl(rendered, "apply", "--server-side", "--dry-run=server", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Count(out, "(server dry run)")).To(Equal(len(objs)), out)
}

// TestDockerfileBaseImagesArePinned: every base image of the Dockerfile is pinned by digest.
func TestDockerfileBaseImagesArePinned(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`^FROM (--platform=\S+ )?\S+@sha256:[0-9a-f]{64}( AS \S+)?$`)
	from := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "FROM ") {
			from++
			if !pinned.MatchString(line) {
				t.Errorf("base image not pinned by digest: %s", line)
			}
		}
	}
	if from == 0 || strings.Contains(string(data), ":latest") {
		t.Errorf("Dockerfile: %d FROM lines, :latest present: %v", from, strings.Contains(string(data), ":latest"))
	}
}
