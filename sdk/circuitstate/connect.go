package circuitstate

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/retryops/retry-operator/sdk/config"
)

// Connector returns the ConfigMaps of a namespace: how a Reporter reaches the Kubernetes API. The
// operator's module provides one on client-go (github.com/retryops/retry-operator/pkg/kubereport);
// this module has none, so that a consumer that does not report carries no Kubernetes client.
type Connector func(namespace string, getenv func(string) string) (ConfigMapPatcher, error)

// ReporterFor returns the Reporter a consumer with configuration c runs, or nil when c asks for no
// report (no circuitReport) or connect is nil. Without a circuit breaker in the policy the Reporter
// still reports Kafka connection problems. The pod's name comes from POD_NAME (the downward API),
// else the host name, which Kubernetes sets to it.
func ReporterFor(c *config.Config, getenv func(string) string, log *slog.Logger, connect Connector) (*Reporter, error) {
	if c.CircuitReport == nil || connect == nil {
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
	cms, err := connect(c.Pipeline.Namespace, getenv)
	if err != nil {
		return nil, fmt.Errorf("circuit report: %w", err)
	}
	return &Reporter{
		ConfigMaps: cms,
		ConfigMap:  c.CircuitReport.ConfigMap,
		Pod:        pod,
		Interval:   config.Dur(c.CircuitReport.Interval, config.DefaultCircuitReportInterval),
		Log:        log,
	}, nil
}
