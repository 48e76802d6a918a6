// Command manager runs the retry-operator controllers.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// options are the manager's command-line settings.
type options struct {
	kafka                   kafkaFlags
	kafkaRequestTimeout     time.Duration
	kafkaAdminBatchWindow   time.Duration
	metricsAddr             string
	metricsSecure           bool
	probeAddr               string
	leaderElect             bool
	leaderElectionID        string
	leaderElectionNamespace string
	controllers             controllers.Options
	zap                     zap.Options
	deadLettersAPI          deadLettersAPIFlags
}

// parseFlags registers the manager's flags on fs and parses args. main passes flag.CommandLine, which
// also carries controller-runtime's --kubeconfig.
func parseFlags(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; \"0\" disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS to clients the API server authenticates (TokenReview) and authorises for GET /metrics (SubjectAccessReview, the metrics-reader ClusterRole). "+
		"--metrics-secure=false serves plain HTTP to anyone, for local runs; so does a loopback --metrics-bind-address (127.0.0.1:8080) unless --metrics-secure is given.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "retry-operator.retry.retryops.dev", "Name of the Lease used for leader election.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	fs.StringVar(&o.controllers.OperatorNamespace, "operator-namespace", envOr("POD_NAMESPACE", controllers.DefaultOperatorNamespace),
		"The manager's own namespace (env POD_NAMESPACE), which holds the topic ledger: the record of the topics the operator created or adopted for each resource. Tenants must not be able to write ConfigMaps there.")
	fs.DurationVar(&o.controllers.StatusRefreshInterval, "status-refresh-interval", 30*time.Second, "How often live figures (DLQ counts, consumer lag) are refreshed.")
	fs.StringVar(&o.controllers.Autoscaler, "autoscaler", controllers.AutoscalerAuto, "The autoscaler made for a pipeline's spec.autoscaling: auto (a KEDA ScaledObject when KEDA is installed, else an HPA on the external metric the manager serves), hpa or keda.")
	fs.DurationVar(&o.controllers.CircuitReportInterval, "circuit-report-interval", controllers.DefaultCircuitReportInterval, "How often consumers repeat a circuit breaker report that is not Closed; a report not repeated for three intervals is ignored.")
	fs.StringVar(&o.controllers.DispatcherImage, "dispatcher-image", controllers.DefaultDispatcherImage, "Image of the dispatcher that serves sink-mode ConsumerPipelines.")
	fs.Func("alert-rule-labels", "Comma-separated key=value labels added to every PrometheusRule and alert ConfigMap, such as the label your Prometheus Operator's ruleSelector matches (release=prometheus).", func(v string) error {
		labels, err := parseLabels(v)
		o.controllers.AlertRuleLabels = labels
		return err
	})
	o.controllers.AlertRunbookBaseURL = render.DefaultRunbookBaseURL
	fs.Func("alert-runbook-base-url", "Page of the runbooks that every alert rule's runbook_url annotation points into, followed by #<alert name in lower case> "+
		"(default "+render.DefaultRunbookBaseURL+"); a copy of docs/runbooks.md where your team keeps its own.", func(v string) error {
		if err := render.ValidRunbookBaseURL(v); err != nil {
			return err
		}
		o.controllers.AlertRunbookBaseURL = v
		return nil
	})
	o.controllers.KEDAPrometheusAddress = controllers.DefaultKEDAPrometheusAddress
	fs.Func("keda-prometheus-address", "Prometheus server (http or https URL) that the KEDA ScaledObjects of autoscaled ConsumerPipelines query for their due lag, when KEDA is installed; it must scrape the operator's metrics "+
		"(default "+controllers.DefaultKEDAPrometheusAddress+").", func(v string) error {
		if err := validPrometheusAddress(v); err != nil {
			return err
		}
		o.controllers.KEDAPrometheusAddress = v
		return nil
	})
	fs.Func("kafka-bootstrap-servers", "Comma-separated host:port list of the operator-wide default Kafka cluster (env KAFKA_BOOTSTRAP_SERVERS).", func(v string) error {
		o.controllers.DefaultBootstrapServers = splitList(v)
		return nil
	})
	o.controllers.DefaultBootstrapServers = splitList(os.Getenv("KAFKA_BOOTSTRAP_SERVERS"))
	fs.DurationVar(&o.kafkaRequestTimeout, "kafka-request-timeout", franz.DefaultRequestTimeout, "Upper bound of every Kafka admin call (dial, authentication and all round trips).")
	fs.DurationVar(&o.kafkaAdminBatchWindow, "kafka-admin-batch-window", kafka.DefaultBatchWindow, "How long the Kafka admin client of a connection gathers the topic describes, creates and alters of all resources on it into one request per broker; 0 sends each call alone.")
	fs.DurationVar(&o.controllers.DeletionTimeout, "kafka-deletion-timeout", controllers.DefaultDeletionTimeout, "How long a deleted DeadLetterQueue or ConsumerPipeline waits for Kafka to delete its topics before it goes anyway, with a Warning event.")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose resources the operator reconciles and whose children it caches (default: every namespace). The RBAC stays a ClusterRole: PrometheusRule detection needs the CRDs cluster-wide.", func(v string) error {
		o.controllers.WatchNamespaces = splitList(v)
		for _, ns := range o.controllers.WatchNamespaces {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				return fmt.Errorf("namespace %q: %s", ns, strings.Join(errs, "; "))
			}
		}
		return nil
	})
	fs.IntVar(&o.controllers.MaxConcurrentReconciles, "max-concurrent-reconciles", controllers.DefaultMaxConcurrentReconciles, "How many resources of one kind are reconciled at once.")
	o.kafka.bind(fs)
	o.deadLettersAPI.bind(fs)
	o.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if !flagGiven(fs, "metrics-secure") && isLoopback(o.metricsAddr) {
		// Only processes of the same host (of the same pod, in a cluster) reach a loopback address:
		// the local stack (make run, make dev) and a kube-rbac-proxy style sidecar.
		o.metricsSecure = false
	}
	if o.controllers.StatusRefreshInterval < time.Second {
		return nil, fmt.Errorf("--status-refresh-interval must be at least 1s, got %s", o.controllers.StatusRefreshInterval)
	}
	switch o.controllers.Autoscaler {
	case controllers.AutoscalerAuto, controllers.AutoscalerHPA, controllers.AutoscalerKEDA:
	default:
		return nil, fmt.Errorf("--autoscaler must be auto, hpa or keda, got %q", o.controllers.Autoscaler)
	}
	if o.controllers.CircuitReportInterval < time.Second {
		return nil, fmt.Errorf("--circuit-report-interval must be at least 1s, got %s", o.controllers.CircuitReportInterval)
	}
	var err error
	if o.controllers.DefaultKafkaTLS, o.controllers.DefaultKafkaSASL, err = o.kafka.resolve(os.ReadFile, os.Getenv); err != nil {
		return nil, err
	}
	o.controllers.KafkaTenancy = o.kafka.tenancy
	o.controllers.KafkaConsumerSecret = o.kafka.consumerSecret
	return o, nil
}

// validPrometheusAddress checks that v is an absolute http or https URL, which KEDA's prometheus
// scaler needs: it appends the query API's path to it. It carries no credentials: it is copied into
// every autoscaled pipeline's ScaledObject, which that namespace's users read.
func validPrometheusAddress(v string) error {
	u, err := url.Parse(v)
	if err == nil && u.User != nil {
		return errors.New("--keda-prometheus-address: no credentials in the address, which every autoscaled pipeline's ScaledObject repeats to its namespace's users")
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--keda-prometheus-address %q: want an http or https URL such as %s", v, controllers.DefaultKEDAPrometheusAddress)
	}
	return nil
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// isLoopback reports whether the listen address addr (host:port) names a loopback host.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// kafkaFlags are the TLS and SASL settings of the operator-wide default Kafka connection. The SASL
// password is never a flag (flags show in process listings): it comes from --kafka-sasl-password-file
// or the environment variable KAFKA_SASL_PASSWORD. It is read once at start; a resource that needs
// rotation without a restart names a Secret in spec.kafka.sasl instead.
type kafkaFlags struct {
	tls            bool
	caFile         string
	certFile       string
	keyFile        string
	serverName     string
	saslMechanism  string
	saslUsername   string
	passwordFile   string
	allowPlaintext bool
	consumerSecret string
	// tenancy are the limits on the connections of resources.
	tenancy kafkaspec.Tenancy
}

func (k *kafkaFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&k.tls, "kafka-tls", false, "Use TLS to the default Kafka cluster (implied by --kafka-tls-ca-file).")
	fs.StringVar(&k.caFile, "kafka-tls-ca-file", "", "PEM CA bundle that signs the default Kafka cluster's certificates (default: the system roots).")
	fs.StringVar(&k.certFile, "kafka-tls-cert-file", "", "PEM client certificate of the manager for a default Kafka cluster with TLS client authentication (with --kafka-tls-key-file). The pipelines' pods never get it: they use --kafka-consumer-secret.")
	fs.StringVar(&k.keyFile, "kafka-tls-key-file", "", "PEM private key of --kafka-tls-cert-file.")
	fs.Func("kafka-consumer-secret", "Name of the Secret, in each pipeline's namespace, that gives the pods of pipelines on the default Kafka cluster their own identity there (\"{namespace}\" stands for the namespace): keys password (and username, else the user of sasl.jaas.config, else the Secret's name) with SASL, user.crt and user.key (or tls.crt and tls.key) with TLS client authentication: a Strimzi KafkaUser's Secret. The manager's own credentials never reach a pod; without this Secret a pipeline on a default cluster that authenticates shows KafkaCredentialsMissing and gets no Deployment.", func(v string) error {
		k.consumerSecret = v
		return kafkaspec.CheckConsumerSecret(v)
	})
	fs.StringVar(&k.serverName, "kafka-tls-server-name", "", "Name checked in the default Kafka cluster's certificates (default: the host dialed).")
	fs.StringVar(&k.saslMechanism, "kafka-sasl-mechanism", "", "SASL mechanism for the default Kafka cluster: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: no SASL).")
	fs.StringVar(&k.saslUsername, "kafka-sasl-username", "", "SASL user for the default Kafka cluster.")
	fs.StringVar(&k.passwordFile, "kafka-sasl-password-file", "", "File holding the SASL password for the default Kafka cluster (else env KAFKA_SASL_PASSWORD).")
	fs.BoolVar(&k.allowPlaintext, "kafka-allow-plaintext-password", false, "Allow --kafka-sasl-mechanism=PLAIN without TLS, which sends the password in clear text (a local or test cluster only); refused at start otherwise.")
	fs.Func("kafka-allowed-bootstrap-servers", "Comma-separated host:port patterns that the bootstrap servers a resource names in spec.kafka must match; \"*\" stands for leading labels, as in *.kafka.svc:9092 (default: any server).", func(v string) error {
		k.tenancy.AllowedBootstrapServers = splitList(v)
		return kafkaspec.CheckAllowedServers(k.tenancy.AllowedBootstrapServers)
	})
	fs.Func("topic-prefix", "Topic claim policy for a cluster shared by several tenants: every topic a resource makes the operator create or adopt, and the source topic a pipeline reads, must start with this prefix, where {namespace} stands for the resource's namespace (\"{namespace}.\" gives namespace team-a the topics team-a.*). Empty (the default) allows any name.", func(v string) error {
		k.tenancy.TopicPrefix = v
		return kafkaspec.CheckTopicPrefix(v)
	})
	fs.Func("group-prefix", "Consumer group claim policy: every consumer group a ConsumerPipeline joins must start with this prefix, where {namespace} stands for the pipeline's namespace (default: the --topic-prefix; a pipeline's default group, <namespace>.<name>, meets \"{namespace}.\"). Set it empty to allow any group.", func(v string) error {
		k.tenancy.GroupPrefix = &v
		return kafkaspec.CheckGroupPrefix(v)
	})
	fs.BoolVar(&k.tenancy.RequireResourceCredentials, "require-resource-credentials", false, "Refuse resources whose spec.kafka names no bootstrap servers, which would borrow the default connection and its credentials; each tenant then connects with its own (Kafka ACLs enforce tenancy).")
}

// maxCABundle bounds the default connection's CA bundle, which every pipeline's ConfigMap on the
// default connection carries (a ConfigMap holds at most 1 MiB).
const maxCABundle = 256 << 10

// resolve builds the default connection's TLS and SASL settings.
func (k *kafkaFlags) resolve(readFile func(string) ([]byte, error), getenv func(string) string) (*kafka.TLSConfig, *kafka.SASLConfig, error) {
	var tlsCfg *kafka.TLSConfig
	if (k.certFile == "") != (k.keyFile == "") {
		return nil, nil, errors.New("--kafka-tls-cert-file and --kafka-tls-key-file go together")
	}
	if k.tls || k.caFile != "" || k.serverName != "" || k.certFile != "" {
		tlsCfg = &kafka.TLSConfig{ServerName: k.serverName}
		if k.caFile != "" {
			ca, err := readFile(k.caFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--kafka-tls-ca-file: %w", err)
			}
			// The bundle goes into every pipeline's ConfigMap on the default connection.
			if len(ca) > maxCABundle {
				return nil, nil, fmt.Errorf("--kafka-tls-ca-file: %d bytes, more than the %d a CA bundle may hold here", len(ca), maxCABundle)
			}
			// Only the certificates, encoded again, reach the ConfigMaps: never other text of the file.
			if tlsCfg.CAPEM, err = kafka.CABundle(ca); err != nil {
				return nil, nil, fmt.Errorf("--kafka-tls-ca-file %s: %w", k.caFile, err)
			}
		}
		if k.certFile != "" {
			cert, err := readFile(k.certFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--kafka-tls-cert-file: %w", err)
			}
			key, err := readFile(k.keyFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--kafka-tls-key-file: %w", err)
			}
			tlsCfg.CertPEM, tlsCfg.KeyPEM = cert, key
		}
	}
	var saslCfg *kafka.SASLConfig
	switch {
	case k.saslMechanism != "":
		password := getenv("KAFKA_SASL_PASSWORD")
		if k.passwordFile != "" {
			b, err := readFile(k.passwordFile)
			if err != nil {
				return nil, nil, fmt.Errorf("--kafka-sasl-password-file: %w", err)
			}
			password = strings.TrimRight(string(b), "\r\n")
		}
		saslCfg = &kafka.SASLConfig{Mechanism: k.saslMechanism, Username: k.saslUsername, Password: password, AllowPlaintext: k.allowPlaintext}
	case k.saslUsername != "" || k.passwordFile != "":
		return nil, nil, errors.New("--kafka-sasl-username and --kafka-sasl-password-file need --kafka-sasl-mechanism")
	}
	// Validate the default connection now, so a typo fails at start and not on every reconcile.
	conn := kafka.Connection{BootstrapServers: []string{"validate.invalid:9092"}, TLS: tlsCfg, SASL: saslCfg}
	if err := conn.Validate(); err != nil {
		return nil, nil, fmt.Errorf("default Kafka connection: %w", err)
	}
	return tlsCfg, saslCfg, nil
}

// parseLabels parses "k1=v1,k2=v2" into labels, checking each key and value.
func parseLabels(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range splitList(v) {
		k, val, ok := strings.Cut(item, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", item)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(val); len(errs) > 0 {
			return nil, fmt.Errorf("label value %q: %s", val, strings.Join(errs, "; "))
		}
		out[k] = val
	}
	return out, nil
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// newScheme returns the scheme with the built-in kinds and this operator's kinds.
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(retryv1alpha1.AddToScheme(s))
	return s
}

// metricsOptions configures the manager's metrics server from the flags.
func metricsOptions(o *options) metricsserver.Options {
	opts := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.metricsSecure,
		// HTTP/2 is disabled against the HTTP/2 Stream Cancellation and Rapid Reset CVEs.
		TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
	}
	if o.metricsSecure {
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return opts
}

// run starts the manager with cfg and blocks until ctx ends or the manager fails.
func run(ctx context.Context, cfg *rest.Config, o *options) error {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	log := ctrl.Log.WithName("setup")

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        newScheme(),
		Metrics:                       metricsOptions(o),
		Cache:                         controllers.CacheOptions(o.controllers.WatchNamespaces),
		HealthProbeBindAddress:        o.probeAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// The only franz-go in the manager: the controllers see Kafka through internal/kafka alone.
	o.controllers.Kafka = kafkaFactory(o)
	if err := controllers.SetupWithManager(ctx, mgr, o.controllers); err != nil {
		return fmt.Errorf("setting up the controllers: %w", err)
	}
	if err := addDeadLettersAPI(mgr, cfg, o); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("adding the readiness check: %w", err)
	}
	log.Info("Starting manager", "watchNamespaces", o.controllers.WatchNamespaces, "leaderElection", o.leaderElect, "metrics", o.metricsAddr, "metricsSecure", o.metricsSecure, "probes", o.probeAddr)
	return mgr.Start(ctx)
}

// kafkaFactory is the manager's Kafka clients: franz-go's, batched per connection unless the batch
// window is 0.
func kafkaFactory(o *options) kafka.ClientFactory {
	f := franz.NewFactory(franz.WithRequestTimeout(o.kafkaRequestTimeout))
	if o.kafkaAdminBatchWindow <= 0 {
		return f
	}
	return kafka.NewBatchingFactory(f, kafka.BatchOptions{Window: o.kafkaAdminBatchWindow})
}

func main() {
	o, err := parseFlags(flag.CommandLine, os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "no Kubernetes API server: set KUBECONFIG or run in a cluster:", err)
		os.Exit(1)
	}
	if err := run(ctrl.SetupSignalHandler(), cfg, o); err != nil {
		ctrl.Log.Error(err, "Manager stopped")
		os.Exit(1)
	}
}

// envOr is the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
