package main

import (
	"flag"
	"fmt"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/extmetrics"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// deadLettersAPIFlags configure the deadletters aggregated API server (internal/dlqapi), which
// every replica runs, leader or not, and which serves external.metrics.k8s.io too
// (internal/extmetrics: the pipelines' due lag for their HorizontalPodAutoscalers).
type deadLettersAPIFlags struct {
	bindAddress   string
	certDir       string
	service       string
	secret        string
	apiService    string
	extAPIService string
}

func (d *deadLettersAPIFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&d.bindAddress, "deadletters-api-bind-address", ":8444", "Address the deadletters aggregated API (deadletters.retryops.dev) binds to; \"0\" disables it.")
	fs.StringVar(&d.certDir, "deadletters-api-cert-dir", "", "Directory holding tls.crt and tls.key for the deadletters API (a cert-manager Secret, mounted); empty: the manager keeps a self-signed certificate in the Secret --deadletters-api-secret and writes its CA into the APIService.")
	fs.StringVar(&d.service, "deadletters-api-service", "retry-operator-deadletters-api", "Name of the Service (in --operator-namespace) the APIService points at: the self-managed certificate is for <service>.<namespace>.svc.")
	fs.StringVar(&d.secret, "deadletters-api-secret", "retry-operator-deadletters-api-tls", "Name of the Secret (in --operator-namespace) holding the self-managed serving certificate.")
	fs.StringVar(&d.apiService, "deadletters-api-apiservice", dlqapi.APIServiceName, "APIService whose caBundle the manager writes with the self-managed certificate's CA; \"-\" writes none.")
	fs.StringVar(&d.extAPIService, "external-metrics-apiservice", dlqapi.ExternalMetricsAPIServiceName, "APIService of external.metrics.k8s.io (config/external-metrics, opt-in) whose caBundle the manager writes too, only when it points at --deadletters-api-service; \"-\" writes none.")
}

// addDeadLettersAPI adds the deadletters API server to mgr, unless it is disabled.
func addDeadLettersAPI(mgr ctrl.Manager, cfg *rest.Config, o *options) error {
	d := o.deadLettersAPI
	if d.bindAddress == "0" {
		return nil
	}
	opts := dlqapi.Options{
		BindAddress: d.bindAddress,
		CertDir:     d.certDir,
		Config:      cfg,
		Storage: &dlqapi.Storage{
			Queues: &dlqapi.ClientQueues{
				Reader:  mgr.GetClient(),
				Secrets: mgr.GetAPIReader(),
				Defaults: kafkaspec.Defaults{BootstrapServers: o.controllers.DefaultBootstrapServers, TLS: o.controllers.DefaultKafkaTLS,
					SASL: o.controllers.DefaultKafkaSASL, Tenancy: o.controllers.KafkaTenancy},
				// Read afresh on every replica: only the leader writes the ledger.
				Ledger:     &kafkaspec.Ledger{Reader: mgr.GetAPIReader(), Namespace: o.controllers.OperatorNamespace},
				Namespaces: o.controllers.WatchNamespaces,
			},
			Kafka: o.controllers.Kafka,
		},
		Groups: []dlqapi.Group{&extmetrics.Group{Storage: &extmetrics.Storage{Reader: mgr.GetClient(), Namespaces: o.controllers.WatchNamespaces}}},
	}
	if d.certDir == "" {
		// Uncached: the Secret is read once at start, never watched.
		c, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
		if err != nil {
			return fmt.Errorf("deadletters API client: %w", err)
		}
		opts.Certs = &dlqapi.CertManager{Client: c, Namespace: o.controllers.OperatorNamespace, SecretName: d.secret, Service: d.service, APIService: d.apiService,
			ExternalMetricsAPIService: d.extAPIService}
	}
	if err := mgr.Add(dlqapi.NewServer(opts)); err != nil {
		return fmt.Errorf("adding the deadletters API: %w", err)
	}
	return nil
}
