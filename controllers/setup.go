package controllers

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// Defaults of Options.
const (
	// DefaultDeletionTimeout is how long a deleting resource waits for Kafka before letting go.
	DefaultDeletionTimeout = 2 * time.Minute
	// DefaultMaxConcurrentReconciles is how many resources of one kind are reconciled at once.
	DefaultMaxConcurrentReconciles = 4
	// DefaultDispatcherImage is the dispatcher image when Options.DispatcherImage is empty.
	DefaultDispatcherImage = "ghcr.io/retryops/retry-dispatcher:latest"
	// maxErrorBackoff caps the work queue's backoff after errors (Kafka unreachable, say), so that
	// recovery is noticed quickly; the resync interval caps it further when shorter.
	maxErrorBackoff = 5 * time.Minute
)

// Options are the operator-wide settings the manager passes to every controller.
type Options struct {
	// StatusRefreshInterval is how often live figures (DLQ counts, lag) are refreshed, and how often
	// topics are compared with their spec (drift is corrected within one interval).
	StatusRefreshInterval time.Duration
	// DispatcherImage is the image of the dispatcher that serves sink-mode pipelines
	// (DefaultDispatcherImage when empty).
	DispatcherImage string
	// AlertRuleLabels are extra labels on the PrometheusRules and alert ConfigMaps, such as the label
	// a Prometheus Operator's ruleSelector matches (release: prometheus).
	AlertRuleLabels map[string]string
	// DefaultBootstrapServers is the operator-wide Kafka connection used by resources whose spec.kafka
	// names no bootstrap servers.
	DefaultBootstrapServers []string
	// DefaultKafkaTLS is the TLS configuration of the default connection; nil means plaintext.
	DefaultKafkaTLS *kafka.TLSConfig
	// DefaultKafkaSASL is the SASL configuration of the default connection; nil means none.
	DefaultKafkaSASL *kafka.SASLConfig
	// KafkaRequestTimeout bounds every Kafka admin call (kafka.DefaultRequestTimeout when zero).
	KafkaRequestTimeout time.Duration
	// DeletionTimeout bounds how long a deleting resource waits for Kafka to delete its topics,
	// counted from its deletion timestamp; then the finalizer goes with a Warning event
	// (DefaultDeletionTimeout when zero).
	DeletionTimeout time.Duration
	// MaxConcurrentReconciles is how many resources of one kind are reconciled at once
	// (DefaultMaxConcurrentReconciles when zero).
	MaxConcurrentReconciles int
	// CircuitReportInterval is how often consumers repeat a circuit breaker report that is not
	// Closed; a report not repeated for three intervals is stale (DefaultCircuitReportInterval when
	// zero).
	CircuitReportInterval time.Duration
	// Clock is the time source of the deletion bound and the offsets batcher (the real clock when
	// nil).
	Clock clock.PassiveClock
}

// SetupWithManager registers every controller of the operator with mgr.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if opts.StatusRefreshInterval <= 0 {
		opts.StatusRefreshInterval = 30 * time.Second
	}
	if opts.DeletionTimeout <= 0 {
		opts.DeletionTimeout = DefaultDeletionTimeout
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.DispatcherImage == "" {
		opts.DispatcherImage = DefaultDispatcherImage
	}
	defaults := KafkaDefaults{BootstrapServers: opts.DefaultBootstrapServers, TLS: opts.DefaultKafkaTLS, SASL: opts.DefaultKafkaSASL}

	if err := setupIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("indexing pipelines: %w", err)
	}
	if err := setupTopicIndexes(ctx, mgr, defaults); err != nil {
		return fmt.Errorf("indexing topic claims and Secrets: %w", err)
	}
	// The operator's gauges, served by the manager's metrics endpoint. Registering again on the same
	// registry (several managers in one process, as in tests) reuses the collectors.
	metrics, err := opmetrics.Register(ctrlmetrics.Registry)
	if err != nil {
		return fmt.Errorf("operator metrics: %w", err)
	}
	if err := (&RetryPolicyReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("retrypolicy-controller"),
		Metrics:  metrics,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("retrypolicy controller: %w", err)
	}

	factory := kafka.NewFactory(kafka.WithRequestTimeout(opts.KafkaRequestTimeout))
	if err := mgr.Add(manager.RunnableFunc(factory.Start)); err != nil {
		return fmt.Errorf("kafka client factory: %w", err)
	}
	access := &kafkaAccess{
		Defaults:    defaults,
		Connections: newConnectionRegistry(factory),
		Offsets:     newOffsetsCache(opts.Clock),
	}
	access.Live = newLiveFigures(opts.Clock, access.Offsets, factory, metrics)
	// Each controller gets its own rate limiter: errors back off per resource from 0.5s up to the
	// resync interval (at most maxErrorBackoff), so a broker that comes back is noticed soon.
	controllerOpts := func() controller.Options {
		return controller.Options{
			MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
				500*time.Millisecond, min(opts.StatusRefreshInterval, maxErrorBackoff)),
		}
	}
	// Whether PrometheusRule is served, shared by both controllers that apply alert rules.
	rules := newRuleAPI(mgr)
	if err := mgr.Add(rules); err != nil {
		return fmt.Errorf("alert rules: %w", err)
	}
	if err := (&DeadLetterQueueReconciler{
		Client:          mgr.GetClient(),
		Recorder:        mgr.GetEventRecorder("deadletterqueue-controller"),
		Kafka:           access,
		Clock:           opts.Clock,
		RefreshInterval: opts.StatusRefreshInterval,
		DeletionTimeout: opts.DeletionTimeout,
		Controller:      controllerOpts(),
		RuleLabels:      opts.AlertRuleLabels,
		Rules:           rules,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("deadletterqueue controller: %w", err)
	}
	if err := (&ConsumerPipelineReconciler{
		Client:          mgr.GetClient(),
		Recorder:        mgr.GetEventRecorder("consumerpipeline-controller"),
		Kafka:           access,
		Clock:           opts.Clock,
		RefreshInterval: opts.StatusRefreshInterval,
		DeletionTimeout: opts.DeletionTimeout,
		Controller:      controllerOpts(),
		DispatcherImage: opts.DispatcherImage,
		RuleLabels:      opts.AlertRuleLabels,
		Rules:           rules,

		CircuitReportInterval: opts.CircuitReportInterval,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("consumerpipeline controller: %w", err)
	}
	return nil
}

// setupTopicIndexes registers the indexes of the topic controllers: claims of DeadLetterQueue topics
// and of pipeline sources (by cluster and topic), and the Secrets both kinds reference.
func setupTopicIndexes(ctx context.Context, mgr ctrl.Manager, d KafkaDefaults) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1.DeadLetterQueue{}, indexDLQByClaim, func(o client.Object) []string {
		q := o.(*v1.DeadLetterQueue)
		return []string{claimKey(connectionServers(q.Spec.Kafka, d), string(q.Spec.Topic.Name))}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1.ConsumerPipeline{}, indexPipelineBySourceClaim, func(o client.Object) []string {
		p := o.(*v1.ConsumerPipeline)
		return []string{claimKey(connectionServers(p.Spec.Kafka, d), string(p.Spec.Source.Topic))}
	}); err != nil {
		return err
	}
	if err := idx.IndexField(ctx, &v1.DeadLetterQueue{}, indexKafkaSecrets, secretIndexFunc); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1.ConsumerPipeline{}, indexKafkaSecrets, secretIndexFunc)
}
