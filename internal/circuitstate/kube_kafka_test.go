package circuitstate

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher/config"
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
	c := &config.Config{Pipeline: config.Pipeline{Namespace: "shop", Name: "orders"}, Policy: &v1.RetryPolicySpec{},
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
