// Package kubereport is the Kubernetes side of a consumer's circuit report: a
// circuitstate.ConfigMapPatcher on client-go, and [ReporterFor], which makes the report a
// consumer's configuration asks for (circuitReport). The operator reads the report into its
// ConsumerPipeline's CircuitOpen condition and KafkaAuthenticationFailed reason.
//
// It lives in the operator's module, not in the data plane's (github.com/retryops/retry-operator/sdk),
// because it brings client-go with it. The dispatcher binary uses it; a library-mode consumer
// imports it only if it wants those conditions on its pipeline:
//
//	loop, err := retryloop.New(cfg, handler, retryloop.WithCircuitReport(kubereport.Connect))
//
// Without it a consumer loses only the CircuitOpen condition (and the Kafka refusal reason) on its
// pipeline; retries, dead letters and every other status field are the same.
package kubereport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
)

// ConfigMaps is a circuitstate.ConfigMapPatcher over client-go's ConfigMaps of one namespace.
type ConfigMaps struct {
	// Client is the namespace's ConfigMaps.
	Client corev1client.ConfigMapInterface
}

// MergePatch sends a JSON merge patch of the named ConfigMap as fieldManager.
func (c ConfigMaps) MergePatch(ctx context.Context, name string, patch []byte, fieldManager string) error {
	_, err := c.Client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}

// requestTimeout bounds each request: client-go sets none, so an API server that accepts and never
// answers held the report's write (and every later state) until the consumer stopped, unlogged. A
// request that times out is a failed write, logged and retried.
var requestTimeout = 10 * time.Second

// Connect is a circuitstate.Connector: the ConfigMaps of namespace, reached the way kubectl
// reaches the API server (KUBECONFIG, read through getenv, when set; else the pod's
// ServiceAccount, in-cluster).
func Connect(namespace string, getenv func(string) string) (circuitstate.ConfigMapPatcher, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kc := getenv(clientcmd.RecommendedConfigPathEnvVar); kc != "" {
		// clientcmd reads the file whole: a FIFO would block the consumer's start, a device never end.
		if fi, err := os.Stat(kc); err != nil {
			return nil, fmt.Errorf("KUBECONFIG: %w", err)
		} else if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("KUBECONFIG %s is not a regular file (%s)", kc, fi.Mode().Type())
		}
		rules.ExplicitPath = kc
	}
	rest, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no Kubernetes API configuration (in-cluster or KUBECONFIG): %w", err)
	}
	rest.UserAgent = circuitstate.FieldManager
	rest.Timeout = requestTimeout
	core, err := corev1client.NewForConfig(rest)
	if err != nil {
		return nil, err
	}
	return ConfigMaps{Client: core.ConfigMaps(namespace)}, nil
}

// ReporterFor returns the Reporter a consumer with configuration c runs, or nil when c asks for no
// report (no circuitReport): circuitstate.ReporterFor with [Connect].
func ReporterFor(c *config.Config, getenv func(string) string, log *slog.Logger) (*circuitstate.Reporter, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	return circuitstate.ReporterFor(c, getenv, log, Connect)
}
