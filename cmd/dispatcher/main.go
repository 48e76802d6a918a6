// Command dispatcher is retry-operator's data plane for sink-mode ConsumerPipelines: it consumes the
// pipeline's source topic and retry tiers, POSTs every record to the sink, retries failures through
// the retry tiers per the RetryPolicy and dead-letters what cannot succeed.
//
// Configuration: the JSON file named by RETRYOPS_CONFIG (rendered by the operator into a ConfigMap)
// and the environment variables KAFKA_BOOTSTRAP_SERVERS, KAFKA_TOPIC_PRIMARY, KAFKA_TOPIC_RETRY,
// KAFKA_TOPIC_DLQ, KAFKA_CONSUMER_GROUP, RETRY_MAX_ATTEMPTS, RETRY_BASE_DELAY_SECONDS,
// RETRY_MAX_DELAY_SECONDS and SINK_URL, which override the file (see sdk/config).
// RETRYOPS_LOG_LEVEL sets the log level (debug, info, warn, error; default info). With
// circuitReport in the config, it reports its circuit breaker's state and Kafka refusing it
// (authentication, TLS, ACLs) to the operator through the Kubernetes API (in-cluster, or
// KUBECONFIG), naming itself by POD_NAME (see sdk/circuitstate).
//
// It serves /metrics on listen.metricsAddress (default :9090) and /healthz and /readyz on
// listen.healthAddress (default :8081), logs JSON to stderr, and stops gracefully on SIGTERM or
// SIGINT: it stops fetching, lets in-flight deliveries finish for up to drainTimeout, commits what
// finished and leaves the consumer group. Exit status 0 after a graceful stop, 1 on a configuration
// or startup error.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/retryops/retry-operator/pkg/kubereport"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
)

// EnvLogLevel sets the log level.
const EnvLogLevel = "RETRYOPS_LOG_LEVEL"

func main() {
	os.Exit(run(os.Getenv))
}

func run(getenv func(string) string) int {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel(getenv(EnvLogLevel))}))
	cfg, err := config.Load("", getenv)
	if err != nil {
		log.Error("Invalid configuration", "error", err)
		return 1
	}
	if cfg.Sink == nil {
		log.Error("Invalid configuration", "error", fmt.Sprintf("sink.url (%s) is required by the dispatcher", config.EnvSinkURL))
		return 1
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	sink := dispatcher.NewHTTPSink(cfg.Sink.URL, int(cfg.Delivery.MaxInFlight))
	opts := dispatcher.Options{
		Config:       cfg,
		Handler:      sink,
		BatchHandler: batchHandler(cfg, sink),
		Logger:       log,
		Registerer:   reg,
	}
	// The circuit breaker's state goes to the operator when the config asks (sdk/circuitstate,
	// through client-go: pkg/kubereport).
	reporter := dispatcher.CircuitReporter(&opts, getenv, kubereport.Connect)
	e, err := dispatcher.New(opts)
	if err != nil {
		log.Error("Cannot start the dispatcher", "error", err)
		return 1
	}
	srv, err := dispatcher.Serve(cfg.Listen, reg, e, log)
	if err != nil {
		log.Error("Cannot serve metrics and health endpoints", "error", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		log.Info("Stopping on signal")
	}()
	stopReporter := reporter.Start()
	err = e.Run(ctx)
	stopReporter()
	// Within the grace period: see ShutdownAfterDrain and circuitstate.RemoveTimeout.
	sctx, cancel := context.WithTimeout(context.Background(), serverShutdownMax)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err != nil {
		log.Error("Dispatcher failed", "error", err)
		return 1
	}
	return 0
}

// batchHandler is the engine's BatchHandler: the sink itself when the config has delivery.batch,
// nil (one request per record) otherwise.
func batchHandler(cfg *config.Config, sink *dispatcher.HTTPSink) dispatcher.BatchHandler {
	if cfg.Delivery.Batch == nil {
		return nil
	}
	return sink
}

// serverShutdownMax bounds the shutdown of the metrics and health server after the engine stopped.
const serverShutdownMax = time.Second

func logLevel(s string) slog.Level {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug
	case "warn", "warning":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}
