// Package strimzi_test checks the Kafka objects hack/kind-e2e.sh creates (hack/strimzi-kafka.yaml)
// against the CRDs of the Strimzi release the script pins, kept in testdata/<version>: a
// server-side dry run in envtest, so the API server applies the release's schemas and validation
// rules, as it would on a user's kind cluster.
package strimzi_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

const (
	script      = "hack/kind-e2e.sh"
	objectsFile = "hack/strimzi-kafka.yaml"
	// namespace is where the script creates the objects.
	namespace = "kafka"
)

// pinnedVersion returns the Strimzi release the script installs by default.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(envtestutil.RepoRoot(), script))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^STRIMZI_VERSION=\$\{STRIMZI_VERSION:-(\d+\.\d+\.\d+)\}$`).FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s pins no Strimzi release (a line STRIMZI_VERSION=${STRIMZI_VERSION:-x.y.z})", script)
	}
	if !bytes.Contains(data, []byte("kubectl -n "+namespace+" apply -f "+objectsFile+"\n")) {
		t.Fatalf("%s no longer applies %s in the namespace %s", script, objectsFile, namespace)
	}
	return string(m[1])
}

// readObjects decodes the YAML documents of path.
func readObjects(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// TestKindScriptKafkaObjectsPassAServerSideDryRun installs the pinned release's Kafka and
// KafkaNodePool CRDs into envtest and creates the script's objects with a server-side dry run: the
// API server must accept them as they are (API version, schema, CEL rules). The same objects under
// the kafka.strimzi.io/v1beta2 API that Strimzi 1.0 removed (what the script used to write) are
// refused.
func TestKindScriptKafkaObjectsPassAServerSideDryRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	version := pinnedVersion(t)
	crds := filepath.Join(envtestutil.RepoRoot(), "test", "strimzi", "testdata", version)
	if _, err := os.Stat(crds); err != nil {
		t.Fatalf("%s installs Strimzi %s but its CRDs are not in %s: %v", script, version, crds, err)
	}
	objs := readObjects(t, filepath.Join(envtestutil.RepoRoot(), objectsFile))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		g.Expect(o.GetAPIVersion()).To(Equal("kafka.strimzi.io/v1"), "%s %s", o.GetKind(), o.GetName())
		g.Expect(o.GetNamespace()).To(BeEmpty(), "%s %s: the script chooses the namespace", o.GetKind(), o.GetName())
	}
	g.Expect(kinds).To(Equal(map[string]int{"Kafka": 1, "KafkaNodePool": 1}))

	env, err := envtestutil.Start(crds)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()
	g.Expect(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())

	for _, o := range objs {
		o.SetNamespace(namespace)
		g.Expect(env.Client.Create(ctx, o.DeepCopy(), client.DryRunAll)).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
		// A dry run: nothing stored.
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopy())
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s was stored: %v", o.GetKind(), o.GetName(), err)

		old := o.DeepCopy()
		old.SetAPIVersion("kafka.strimzi.io/v1beta2")
		err = env.Client.Create(ctx, old, client.DryRunAll)
		g.Expect(err).To(HaveOccurred(), "%s %s under v1beta2 was accepted", o.GetKind(), o.GetName())
	}

	// The dry run applies the release's schema: a listener without its required tls is refused.
	for _, o := range objs {
		if o.GetKind() != "Kafka" {
			continue
		}
		bad := o.DeepCopy()
		listeners, _, _ := unstructured.NestedSlice(bad.Object, "spec", "kafka", "listeners")
		g.Expect(listeners).NotTo(BeEmpty())
		delete(listeners[0].(map[string]any), "tls")
		g.Expect(unstructured.SetNestedSlice(bad.Object, listeners, "spec", "kafka", "listeners")).To(Succeed())
		err := env.Client.Create(ctx, bad, client.DryRunAll)
		g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "a listener without tls: %v", err)
	}
}
