package circuitstate

import (
	"fmt"
	"log/slog"
	"os"

	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/retryops/retry-operator/internal/dispatcher/config"
)

// ReporterFor returns the Reporter a consumer with configuration c runs, or nil when c asks for no
// report (no circuitReport). Without a circuit breaker in the policy the Reporter still reports
// Kafka connection problems. It reaches the API server the
// way kubectl does: KUBECONFIG when set, else the pod's ServiceAccount (in-cluster). The pod's name
// comes from POD_NAME (the downward API), else the host name, which Kubernetes sets to it.
func ReporterFor(c *config.Config, getenv func(string) string, log *slog.Logger) (*Reporter, error) {
	if c.CircuitReport == nil {
		return nil, nil
	}
	pod := getenv(config.EnvPodName)
	if pod == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return nil, fmt.Errorf("circuit report: %s is unset and the host name is unknown", config.EnvPodName)
		}
		pod = h
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if kc := getenv(clientcmd.RecommendedConfigPathEnvVar); kc != "" {
		rules.ExplicitPath = kc
	}
	rest, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("circuit report: no Kubernetes API configuration (in-cluster or KUBECONFIG): %w", err)
	}
	rest.UserAgent = FieldManager
	core, err := corev1client.NewForConfig(rest)
	if err != nil {
		return nil, fmt.Errorf("circuit report: %w", err)
	}
	return &Reporter{
		ConfigMaps: core.ConfigMaps(c.Pipeline.Namespace),
		ConfigMap:  c.CircuitReport.ConfigMap,
		Pod:        pod,
		Interval:   config.Dur(c.CircuitReport.Interval, config.DefaultCircuitReportInterval),
		Log:        log,
	}, nil
}
