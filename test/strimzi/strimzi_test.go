// Package strimzi_test checks what hack/kind-e2e.sh creates against what it runs on: the Kafka
// objects (hack/strimzi-kafka.yaml) and Kafka users (config/strimzi) against the CRDs of the Strimzi
// release the script pins, kept in testdata/<version>, with a server-side dry run in envtest, so
// the API server applies the release's schemas and validation rules as it would on a user's kind
// cluster; the Kafka's listeners against a secured production cluster's (TLS, authenticated,
// authorized); the manager's Deployment (config/strimzi/manager) against those objects; and the
// samples (config/strimzi/samples) against the claim policy and the consumer user's ACLs.
package strimzi_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

const (
	script      = "hack/kind-e2e.sh"
	objectsFile = "hack/strimzi-kafka.yaml"
	// namespace is where the script creates the Kafka objects and users.
	namespace = "kafka"
)

func TestMain(m *testing.M) { shared.Main(m) }

// shared is the package's one control plane, with the pinned release's CRDs and the namespaces.
var shared = envtestutil.Shared{
	CRDDirs: func(t testing.TB) []string { return []string{crdDir(t)} },
	Setup:   envtestutil.CreateNamespaces(namespace, "retry-operator-system"),
}

func sharedEnv(t *testing.T) *envtestutil.Env { return shared.Env(t) }

// scriptText returns the script.
func scriptText(t testing.TB) string {
	t.Helper()
	data, err := os.ReadFile(repoPath(script))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// scriptRuns fails unless the script has line, as a whole line (leading blanks aside).
func scriptRuns(t testing.TB, line string) {
	t.Helper()
	for l := range strings.SplitSeq(scriptText(t), "\n") {
		if strings.TrimSpace(l) == line {
			return
		}
	}
	t.Fatalf("%s no longer runs `%s`", script, line)
}

// pinnedVersion returns the Strimzi release the script installs by default.
func pinnedVersion(t testing.TB) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^STRIMZI_VERSION=\$\{STRIMZI_VERSION:-(\d+\.\d+\.\d+)\}$`).FindStringSubmatch(scriptText(t))
	if m == nil {
		t.Fatalf("%s pins no Strimzi release (a line STRIMZI_VERSION=${STRIMZI_VERSION:-x.y.z})", script)
	}
	scriptRuns(t, "kubectl -n "+namespace+" apply -f "+objectsFile)
	return m[1]
}

// crdDir is the directory of the pinned release's CRDs.
func crdDir(t testing.TB) string {
	t.Helper()
	version := pinnedVersion(t)
	crds := repoPath("test", "strimzi", "testdata", version)
	if _, err := os.Stat(crds); err != nil {
		t.Fatalf("%s installs Strimzi %s but its CRDs are not in %s: %v", script, version, crds, err)
	}
	return crds
}

func repoPath(elem ...string) string { return envtestutil.RepoPath(elem...) }

// decode decodes YAML documents.
func decode(t *testing.T, what string, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := envtestutil.DecodeObjects(data)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return objs
}

// readObjects decodes the YAML documents of the repository's file path.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(repoPath(path))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, path, data)
}

// kustomize renders the repository's directory dir with the envtest assets' kubectl.
func kustomize(t *testing.T, env *envtestutil.Env, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := env.Kubectl(nil, "kustomize", repoPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, dir, []byte(out))
}

// dryRun creates obj in ns with a server-side dry run and checks nothing was stored.
func dryRun(g Gomega, env *envtestutil.Env, ns string, obj *unstructured.Unstructured) {
	o := obj.DeepCopy()
	o.SetNamespace(ns)
	g.Expect(env.Client.Create(context.Background(), o.DeepCopy(), client.DryRunAll)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o.DeepCopy())
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s was stored: %v", o.GetKind(), o.GetName(), err)
}

// kafkaObjects returns the Kafka and the objects of hack/strimzi-kafka.yaml.
func kafkaObjects(t *testing.T) (*unstructured.Unstructured, []*unstructured.Unstructured) {
	t.Helper()
	objs := readObjects(t, objectsFile)
	var kafka *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Kafka" {
			kafka = o
		}
	}
	if kafka == nil {
		t.Fatalf("%s has no Kafka", objectsFile)
	}
	return kafka, objs
}

// TestKindScriptKafkaObjectsPassAServerSideDryRun installs the pinned release's CRDs into envtest
// and creates the script's Kafka objects with a server-side dry run: the API server must accept
// them as they are (API version, schema, CEL rules). The same objects under the
// kafka.strimzi.io/v1beta2 API that Strimzi 1.0 removed (what the script used to write) are refused.
func TestKindScriptKafkaObjectsPassAServerSideDryRun(t *testing.T) {
	g := NewWithT(t)
	_, objs := kafkaObjects(t)
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		g.Expect(o.GetAPIVersion()).To(Equal("kafka.strimzi.io/v1"), "%s %s", o.GetKind(), o.GetName())
		g.Expect(o.GetNamespace()).To(BeEmpty(), "%s %s: the script chooses the namespace", o.GetKind(), o.GetName())
	}
	g.Expect(kinds).To(Equal(map[string]int{"Kafka": 1, "KafkaNodePool": 1}))

	env := sharedEnv(t)
	for _, o := range objs {
		dryRun(g, env, namespace, o)
		old := o.DeepCopy()
		old.SetAPIVersion("kafka.strimzi.io/v1beta2")
		old.SetNamespace(namespace)
		err := env.Client.Create(context.Background(), old, client.DryRunAll)
		g.Expect(err).To(HaveOccurred(), "%s %s under v1beta2 was accepted", o.GetKind(), o.GetName())
	}

	// The dry run applies the release's schema: a listener without its required tls is refused.
	kafka, _ := kafkaObjects(t)
	listeners, _, _ := unstructured.NestedSlice(kafka.Object, "spec", "kafka", "listeners")
	g.Expect(listeners).NotTo(BeEmpty())
	delete(listeners[0].(map[string]any), "tls")
	g.Expect(unstructured.SetNestedSlice(kafka.Object, listeners, "spec", "kafka", "listeners")).To(Succeed())
	kafka.SetNamespace(namespace)
	err := env.Client.Create(context.Background(), kafka, client.DryRunAll)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a listener without tls: %v", err)
}
