// Command consumer is a complete small consumer in library mode: the embedder of the documents
// pipeline (config/samples/retry_v1alpha1_consumerpipeline_template.yaml). The operator runs it as
// the pipeline's container, with the pipeline's configuration injected (the file named by
// RETRYOPS_CONFIG and the KAFKA_* and RETRY_* environment variables); the retry loop
// (github.com/retryops/retry-operator/sdk/retryloop) consumes the source topic and the retry tiers,
// calls Embedder.Handle for each record, retries and dead-letters by the pipeline's RetryPolicy,
// serves /metrics, /healthz and /readyz at the configured addresses, and stops gracefully on
// SIGTERM.
//
// A record is a Document in JSON. One that is not (or has no id) is dead-lettered at once
// (retryloop.Permanent); an embedding service that is unavailable is a plain error, retried as the
// policy says (the documents policy's defaultAction is Retry).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/retryops/retry-operator/sdk/retryloop"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, os.Getenv, &LogIndex{Log: log}, log); err != nil {
		log.Error("Consumer failed", "error", err.Error())
		os.Exit(1)
	}
}

// run consumes with the configuration the operator injects (read through getenv) until ctx is
// cancelled, then stops gracefully: in-flight records finish or go back to Kafka uncommitted.
func run(ctx context.Context, getenv func(string) string, index Index, log *slog.Logger, opts ...retryloop.Option) error {
	cfg, err := retryloop.LoadConfig("", getenv)
	if err != nil {
		return err
	}
	e := &Embedder{Index: index}
	// No retryloop.WithCircuitReport: it would bring client-go. The pipeline then shows no
	// CircuitOpen condition; the breaker itself still works.
	loop, err := retryloop.New(cfg, e.Handle, append([]retryloop.Option{retryloop.WithLogger(log)}, opts...)...)
	if err != nil {
		return err
	}
	log.Info("Consuming", "pipeline", cfg.Pipeline.Namespace+"/"+cfg.Pipeline.Name, "source", cfg.Topics.Source)
	return loop.Run(ctx)
}
