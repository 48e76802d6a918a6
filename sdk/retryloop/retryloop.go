// Package retryloop is the library mode of retry-operator: it runs the dispatcher's retry loop
// inside your own Go consumer. You give it a handler; it consumes the pipeline's source topic and
// retry tiers, calls the handler for every record, and on failure classifies the error with the
// pipeline's RetryPolicy, writes the record to the retry tier of its next attempt (delivering it
// again when due, without blocking the partition) or to the dead letter topic with full context
// headers, and commits offsets only once that write is acknowledged. It is the same engine the
// operator's dispatcher runs (whose HTTP sink is just another handler), with the same metrics and
// health endpoints.
//
// Configuration is the one the operator injects into a ConsumerPipeline's pod template: the JSON
// file named by RETRYOPS_CONFIG plus the seed-style environment variables (KAFKA_BOOTSTRAP_SERVERS,
// KAFKA_TOPIC_PRIMARY, KAFKA_TOPIC_RETRY, KAFKA_TOPIC_DLQ, KAFKA_CONSUMER_GROUP, RETRY_MAX_ATTEMPTS,
// RETRY_BASE_DELAY_SECONDS, RETRY_MAX_DELAY_SECONDS); see LoadConfig.
//
//	loop, err := retryloop.New(nil, func(ctx context.Context, r *kgo.Record) error {
//		if err := process(ctx, r.Value); err != nil {
//			var v *ValidationError
//			if errors.As(err, &v) {
//				return retryloop.Permanent(err) // straight to the dead letter queue
//			}
//			return err // classified by the policy (error type "…", message patterns)
//		}
//		return nil
//	})
//	if err != nil { ... }
//	err = loop.Run(ctx) // until ctx is cancelled (SIGTERM), then a graceful stop
//
// Batch mode: NewBatch takes a BatchHandler, which gets up to delivery.batch.maxRecords records at
// once and returns an error per record; each record then gets the fate it would get alone (see
// BatchHandler). It suits a consumer whose work is cheaper in bulk (a multi-row insert, a bulk API).
//
// Classification of a handler's error: Permanent and Transient force the action; HTTPStatus and
// RetryAfter attach what an HTTP answer would carry; the error type matched by the policy's
// errorTypes is ErrorType(err) (an ErrorType() string method, or the Go type name); the message
// matched by messagePatterns is err.Error(); an error after the attempt's context deadline
// (attemptTimeout) is a TimeoutError.
package retryloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
)

// Config is the pipeline configuration (see the config package for every field).
type Config = config.Config

// Handler processes one record. A nil error commits it; an error is classified (see the package
// documentation). The record shows the ORIGINAL topic, partition, offset and timestamp even on a
// retry, and only the record's own headers; Info(ctx) tells the attempt. The context is cancelled
// at the policy's attemptTimeout and when the loop gives up on in-flight work at a stop.
type Handler func(ctx context.Context, r *kgo.Record) error

// LoadConfig reads the configuration file (path, or the file named by RETRYOPS_CONFIG when path is
// "") and the environment (getenv, os.Getenv when nil), fills defaults and validates it.
func LoadConfig(path string, getenv func(string) string) (*Config, error) {
	return config.Load(path, getenv)
}

// DeliveryInfo describes the delivery a handler is called for.
type DeliveryInfo struct {
	// Attempt is the delivery attempt, 1 for the first.
	Attempt int32
	// IdempotencyKey is stable across retries and dead-letter replays: "<topic>/<partition>/<offset>"
	// of the original record.
	IdempotencyKey string
	// FirstFailure is when the first attempt failed; zero on the first attempt.
	FirstFailure time.Time
	// Consumed is the record as consumed (a retry tier's record on a retry).
	Consumed *kgo.Record
}

type infoKey struct{}

// Info returns the delivery a handler's context belongs to.
func Info(ctx context.Context) (DeliveryInfo, bool) {
	d, ok := ctx.Value(infoKey{}).(*DeliveryInfo)
	if !ok {
		return DeliveryInfo{}, false
	}
	return *d, true
}

// Option configures a Loop.
type Option func(*options)

type options struct {
	log       *slog.Logger
	reg       prometheus.Registerer
	gatherer  prometheus.Gatherer
	noHTTP    bool
	kafkaOpts []kgo.Opt
	connect   circuitstate.Connector
}

// WithLogger sets the structured logger (default: JSON to stderr at info level).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegistry registers the metrics on reg and serves reg on /metrics (default: a new registry
// with the Go and process collectors).
func WithRegistry(reg *prometheus.Registry) Option {
	return func(o *options) { o.reg, o.gatherer = reg, reg }
}

// WithoutHTTP serves neither /metrics nor /healthz and /readyz (for a consumer that has its own
// server; use Loop.Ready and the registry there).
func WithoutHTTP() Option { return func(o *options) { o.noHTTP = true } }

// WithKafkaOptions appends franz-go options to the consumer client (tuning, tests).
func WithKafkaOptions(opts ...kgo.Opt) Option {
	return func(o *options) { o.kafkaOpts = append(o.kafkaOpts, opts...) }
}

// WithCircuitReport makes the loop report its circuit breaker's state and Kafka's refusals to the
// operator when the config asks (circuitReport), through connect: the operator module's
// kubereport.Connect (github.com/retryops/retry-operator/pkg/kubereport), which brings client-go.
// Without it nothing is reported and the pipeline shows no CircuitOpen condition; nothing else
// changes.
func WithCircuitReport(connect circuitstate.Connector) Option {
	return func(o *options) { o.connect = connect }
}

// Loop is a running retry loop.
type Loop struct {
	e        *dispatcher.Engine
	cfg      *Config
	gatherer prometheus.Gatherer
	serve    bool
	log      *slog.Logger
	reporter *circuitstate.Reporter
}

// New builds a loop for handler h. A nil cfg is LoadConfig("", os.Getenv). The Kafka clients
// connect lazily; Run consumes.
func New(cfg *Config, h Handler, opts ...Option) (*Loop, error) {
	if h == nil {
		return nil, errors.New("retryloop: a handler is required")
	}
	return newLoop(cfg, h, nil, opts)
}

// newLoop builds a loop for h, or for bh (delivering in batches) when h is nil.
func newLoop(cfg *Config, h Handler, bh BatchHandler, opts []Option) (*Loop, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.log == nil {
		o.log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	if cfg == nil {
		var err error
		if cfg, err = LoadConfig("", os.Getenv); err != nil {
			return nil, err
		}
	} else {
		cfg.Default()
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
	}
	if o.reg == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		o.reg, o.gatherer = reg, reg
	}
	eo := dispatcher.Options{
		Config:       cfg,
		Logger:       o.log,
		Registerer:   o.reg,
		KafkaOptions: o.kafkaOpts,
	}
	if bh != nil {
		b := &batchHandler{h: bh, log: o.log}
		eo.Handler, eo.BatchHandler = b, b
	} else {
		eo.Handler = handler(h, o.log)
	}
	// Like the dispatcher, report the circuit breaker's state to the operator when the config asks
	// and the consumer gave a way to reach the API (WithCircuitReport).
	reporter := dispatcher.CircuitReporter(&eo, os.Getenv, o.connect)
	e, err := dispatcher.New(eo)
	if err != nil {
		return nil, err
	}
	return &Loop{e: e, cfg: cfg, gatherer: o.gatherer, serve: !o.noHTTP, log: o.log, reporter: reporter}, nil
}

// handler adapts a Handler to the engine: it passes the delivery info in the context, turns the
// error into a Result and a panic into an error of type Panic.
func handler(h Handler, log *slog.Logger) dispatcher.Handler {
	return dispatcher.HandlerFunc(func(ctx context.Context, d *dispatcher.Delivery) (res dispatcher.Result) {
		info := &DeliveryInfo{Attempt: d.Attempt, IdempotencyKey: d.IdempotencyKey, FirstFailure: d.FirstFailure, Consumed: d.Consumed}
		ctx = context.WithValue(ctx, infoKey{}, info)
		defer func() {
			if p := recover(); p != nil {
				log.Error("Handler panicked", "idempotencyKey", d.IdempotencyKey, "panic", fmt.Sprint(p))
				res = result(ctx, &panicError{value: p})
			}
		}()
		return result(ctx, h(ctx, d.Record))
	})
}

type panicError struct{ value any }

func (p *panicError) Error() string     { return fmt.Sprintf("handler panicked: %v", p.value) }
func (p *panicError) ErrorType() string { return "Panic" }

// Run consumes until ctx is cancelled, then stops gracefully (see dispatcher.Engine.Run). It serves
// /metrics and /healthz, /readyz on the configured listen addresses unless WithoutHTTP was given.
func (l *Loop) Run(ctx context.Context) error {
	if l.serve {
		srv, err := dispatcher.Serve(l.cfg.Listen, l.gatherer, l.e, l.log)
		if err != nil {
			return fmt.Errorf("serving metrics and health: %w", err)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
	}
	stopReporter := l.reporter.Start()
	defer stopReporter()
	return l.e.Run(ctx)
}

// Ready reports whether the loop joined its consumer group and is not stopping.
func (l *Loop) Ready() bool { return l.e.Ready() }

// Gatherer is the registry the metrics are served from.
func (l *Loop) Gatherer() prometheus.Gatherer { return l.gatherer }

// Config is the loop's configuration, with defaults filled in.
func (l *Loop) Config() *Config { return l.cfg }
