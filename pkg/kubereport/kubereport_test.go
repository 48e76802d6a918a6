package kubereport

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/policy"
)

// Every pipeline's consumers report Kafka refusing them, with or without a circuit breaker in the
// policy: ReporterFor makes a Reporter whenever the config has a circuitReport, and none without.
func TestReporterForWithoutACircuitBreaker(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{config.EnvPodName: "orders-dispatcher-a", "KUBECONFIG": kubeconfig}
	c := &config.Config{Pipeline: config.Pipeline{Namespace: "shop", Name: "orders"}, Policy: &policy.Spec{},
		CircuitReport: &config.CircuitReport{ConfigMap: "orders-dispatcher-circuit"}}
	r, err := ReporterFor(c, func(k string) string { return env[k] }, nil)
	if err != nil || r == nil || r.ConfigMap != "orders-dispatcher-circuit" || r.Pod != "orders-dispatcher-a" {
		t.Fatalf("ReporterFor without a circuit breaker = %+v, %v; want a Reporter of orders-dispatcher-circuit for the pod", r, err)
	}
	c.CircuitReport = nil
	if r, err := ReporterFor(c, func(k string) string { return env[k] }, nil); r != nil || err != nil {
		t.Errorf("ReporterFor without circuitReport = %+v, %v; want nil, nil", r, err)
	}
}

// ConfigMaps sends what the Reporter writes as a JSON merge patch of the ConfigMap in its
// namespace, with the consumers' field manager.
func TestConfigMapsSendsAMergePatch(t *testing.T) {
	cs := fake.NewSimpleClientset()
	patch := []byte(`{"data":{"pod-a":null}}`)
	if err := (ConfigMaps{Client: cs.CoreV1().ConfigMaps("shop")}).MergePatch(context.Background(), "orders-circuit", patch, "retryops-dispatcher"); err == nil {
		t.Fatalf("patching a ConfigMap that does not exist succeeded")
	}
	var got []k8stesting.PatchActionImpl
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok {
			got = append(got, p)
		}
	}
	if len(got) != 1 {
		t.Fatalf("%d patches, want 1", len(got))
	}
	p := got[0]
	if p.GetNamespace() != "shop" || p.Name != "orders-circuit" || p.PatchType != types.MergePatchType ||
		p.PatchOptions.FieldManager != "retryops-dispatcher" || !json.Valid(p.Patch) || string(p.Patch) != string(patch) {
		t.Errorf("patch %s/%s type %s manager %q body %s", p.GetNamespace(), p.Name, p.PatchType, p.PatchOptions.FieldManager, p.Patch)
	}
}
