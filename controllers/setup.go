package controllers

// The manager's permissions, generated into config/rbac/role.yaml by `make manifests`: exactly the
// verbs the code uses, no wildcards (rbac_test.go checks both, and that a running manager sends no
// request the role does not grant). Reads go through the cache (list, watch), but for the uncached
// GETs: Secrets (never listed or watched, see cache.go), the stored spec.template of a pipeline, the
// ConfigMaps read uncached (topic ledgers) and an object of a child's name the cache does not show
// (apply.Owned: a child of the operator's whose label was removed, or someone else's object). Writes are server-side applies and merge patches
// (patch; create for an object that does not exist yet, which an apply that makes one needs too),
// never updates; configmaps delete is for the alert ConfigMap replaced by a
// PrometheusRule once that kind is served, serviceaccounts delete for the consumers' access objects
// of a pipeline that no longer needs them. The CRDs are watched, by metadata, to notice the
// PrometheusRule CRD coming and going. Owner references with blockOwnerDeletion need update on the
// finalizers of the owners' kinds: those with children (RetryPolicies have none).
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies,verbs=list;watch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=deadletterqueues,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=consumerpipelines,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=deadletteractions,verbs=list;watch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=deadletteractions/status,verbs=patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=retrypolicies/status;deadletterqueues/status;consumerpipelines/status,verbs=patch
// +kubebuilder:rbac:groups=retry.retryops.dev,resources=deadletterqueues/finalizers;consumerpipelines/finalizers,verbs=update
// +kubebuilder:rbac:groups=core,resources=secrets,verbs=get
// +kubebuilder:rbac:groups=core,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=core,resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=core,resources=serviceaccounts,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/policy"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/internal/ruleapi"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Defaults of Options.
const (
	// DefaultDeletionTimeout is how long a deleting resource waits for Kafka before letting go.
	DefaultDeletionTimeout = 2 * time.Minute
	// DefaultMaxConcurrentReconciles is how many resources of one kind are reconciled at once.
	DefaultMaxConcurrentReconciles = 4
	// DefaultDispatcherImage is the dispatcher image when Options.DispatcherImage is empty: the tag
	// `make docker-build` gives a local build (DISPATCHER_IMG); deployments set --dispatcher-image
	// through kustomize images, never a moving tag such as latest.
	DefaultDispatcherImage = "ghcr.io/retryops/retry-dispatcher:dev"
	// DefaultOperatorNamespace is Options.OperatorNamespace when empty: the namespace config/default
	// installs the manager in.
	DefaultOperatorNamespace = "retry-operator-system"
	// DefaultKEDAPrometheusAddress is Options.KEDAPrometheusAddress when empty: the Service the
	// Prometheus Operator makes for its Prometheus servers, in kube-prometheus' namespace.
	DefaultKEDAPrometheusAddress = "http://prometheus-operated.monitoring.svc:9090"
	// maxErrorBackoff caps the work queue's backoff after errors (Kafka unreachable, say), so that
	// recovery is noticed quickly; the resync interval caps it further when shorter.
	maxErrorBackoff = 5 * time.Minute
)

// Options are the operator-wide settings the manager passes to every controller.
type Options struct {
	// Kafka hands out the Kafka clients (required): the admin client of each connection, and record
	// scans. When it is also a manager.Runnable (the franz-go factory is: it sweeps idle clients and
	// closes them all when the manager stops), it is added to the manager.
	Kafka kafka.ClientFactory
	// StatusRefreshInterval is how often live figures (DLQ counts, lag) are refreshed, and how often
	// topics are compared with their spec (drift is corrected within one interval).
	StatusRefreshInterval time.Duration
	// DispatcherImage is the image of the dispatcher that serves sink-mode pipelines
	// (DefaultDispatcherImage when empty).
	DispatcherImage string
	// KEDAPrometheusAddress is the Prometheus server (http or https URL) the ScaledObjects query for
	// a pipeline's due lag when KEDA is installed; it must scrape the operator's metrics
	// (DefaultKEDAPrometheusAddress when empty).
	KEDAPrometheusAddress string
	// AlertRuleLabels are extra labels on the PrometheusRules and alert ConfigMaps, such as the label
	// a Prometheus Operator's ruleSelector matches (release: prometheus).
	AlertRuleLabels map[string]string
	// AlertRunbookBaseURL is the runbooks' page the rules' runbook_url annotations point into
	// (render.DefaultRunbookBaseURL when empty).
	AlertRunbookBaseURL string
	// DefaultBootstrapServers is the operator-wide Kafka connection used by resources whose spec.kafka
	// names no bootstrap servers.
	DefaultBootstrapServers []string
	// DefaultKafkaTLS is the TLS configuration of the default connection; nil means plaintext.
	DefaultKafkaTLS *kafka.TLSConfig
	// DefaultKafkaSASL is the SASL configuration of the default connection; nil means none.
	DefaultKafkaSASL *kafka.SASLConfig
	// KafkaConsumerSecret names the Secret, in each pipeline's namespace, holding the identity of the
	// pipeline's pods on the default connection ({namespace} stands for the namespace); see
	// kafkaspec.ResolveConsumerIdentity.
	KafkaConsumerSecret string
	// KafkaTenancy limits the Kafka connections resources may use (allow-list, own credentials) and
	// the topics a namespace may claim (TopicPrefix).
	KafkaTenancy kafkaspec.Tenancy
	// OperatorNamespace is the manager's own namespace, which holds the topic ledger
	// (DefaultOperatorNamespace when empty). Tenants must not be able to write ConfigMaps there.
	OperatorNamespace string
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
	// Autoscaler is the kind of autoscaler made for spec.autoscaling: AutoscalerAuto (a KEDA
	// ScaledObject when its kind is served, else an HPA; the default when empty), AutoscalerHPA or
	// AutoscalerKEDA.
	Autoscaler string
	// WatchNamespaces, when not empty, are the only namespaces whose resources and children the
	// operator sees (--watch-namespaces); give the manager CacheOptions of the same namespaces.
	WatchNamespaces []string
	// ActionClock paces dead-letter replays and their progress reports (the real clock when nil).
	ActionClock clock.Clock
	// Clock is the time source of the deletion bound, the live figures and the circuit reports (the
	// real clock when nil).
	Clock clock.PassiveClock
}

// kafkaAccess is what the reconcilers of the kinds that own topics share about Kafka: the default
// connection, the clients, and the batched reads of the live figures (internal/kafkastats).
type kafkaAccess struct {
	Defaults    kafkaspec.Defaults
	Connections *kafka.Registry
	// Scanner reads records (the record of decisions).
	Scanner kafka.Scanner
	// Producer writes the record of decisions' tombstones (the queue reconciler's tidying).
	Producer kafka.Producer
	Offsets  *kafkastats.Offsets
	// Topics are the descriptions of the topics, read once per connection per interval.
	Topics  *kafkastats.Topics
	Commits *kafkastats.Commits
	// Due finds where the due records of each retry tier end (status.dueLag).
	Due *kafkastats.DueOffsets
	// Replayed is where dead-letter replays wrote into retry tiers: records due when written, which
	// Due takes for retries (nil: none noted).
	Replayed *kafkastats.Replayed
	Tallies  *kafkastats.Tallies
	// ByPipeline is each queue's complete count of dead letters by pipeline, as last written to its
	// status (status.pipelines shows the 20 largest only), by the queue's owner name.
	ByPipeline *kafkastats.Counts
}

// topicReconciler is what the reconcilers of the kinds that own topics (DeadLetterQueue,
// ConsumerPipeline) share: the clients, Kafka, the clock, the deletion bound and the alert rules,
// and the parts of their reconcile that are the same: the finalizer, the connection, the claims on
// topics, the record of the topics created, and the bounded deletion.
type topicReconciler struct {
	client.Client
	// Ledger records the topics the operator created or adopted for each resource.
	Ledger   *kafkaspec.Ledger
	Recorder recorder.EventRecorder
	Kafka    *kafkaAccess
	Clock    clock.PassiveClock
	// missing tracks references missing past ReferenceGracePeriod (progress.go); nil warns of none.
	missing *missingReferences
	// Metrics are the operator's gauges; nil exports nothing.
	Metrics *opmetrics.Metrics
	// RefreshInterval is the resync period: live figures are at most one old, drift in Kafka is
	// corrected within one.
	RefreshInterval time.Duration
	// DeletionTimeout bounds how long a deleting resource waits for Kafka before letting go.
	DeletionTimeout time.Duration
	// Controller are extra controller options (concurrency, rate limiter).
	Controller controller.Options
	// RuleLabels are extra labels on the alert rule objects.
	RuleLabels map[string]string
	// RunbookBaseURL is the runbooks' page of the rules' runbook_url annotations.
	RunbookBaseURL string
	// Rules knows whether PrometheusRule is served.
	Rules *ruleapi.API
	// Policies compiles RetryPolicies once per generation, shared with the RetryPolicy reconciler;
	// nil compiles every time.
	Policies *policy.Cache
	// Applied holds the applies of children found unnecessary (apply.Cache), shared by the
	// reconcilers; nil holds none.
	Applied *apply.Cache
}

// compilePolicy compiles rp through cache, or directly when cache is nil.
func compilePolicy(cache *policy.Cache, rp *retryv1alpha1.RetryPolicy) (*retry.Compiled, error) {
	if cache == nil {
		return retry.Compile(policy.FromSpec(rp.Spec))
	}
	return cache.Compile(rp)
}

// reconcilers are the operator's reconcilers, built on one set of shared dependencies.
type reconcilers struct {
	policy   *RetryPolicyReconciler
	queue    *DeadLetterQueueReconciler
	pipeline *ConsumerPipelineReconciler
	action   *DeadLetterActionReconciler
	rules    *ruleapi.API
}

// newReconcilers builds the reconcilers of mgr's controllers on client c (mgr's client, or one that
// wraps it), with opts' defaults applied.
func newReconcilers(mgr ctrl.Manager, c client.Client, opts Options) (*reconcilers, error) {
	if opts.Kafka == nil {
		return nil, errors.New("no Kafka client factory in the options")
	}
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
	if opts.KEDAPrometheusAddress == "" {
		opts.KEDAPrometheusAddress = DefaultKEDAPrometheusAddress
	}
	// The operator's gauges, served by the manager's metrics endpoint. Registering again on the same
	// registry (several managers in one process, as in tests) reuses the collectors.
	metrics, err := opmetrics.Register(ctrlmetrics.Registry)
	if err != nil {
		return nil, fmt.Errorf("operator metrics: %w", err)
	}
	offsets := kafkastats.NewOffsets(opts.Clock)
	access := &kafkaAccess{
		Defaults: kafkaspec.Defaults{BootstrapServers: opts.DefaultBootstrapServers, TLS: opts.DefaultKafkaTLS, SASL: opts.DefaultKafkaSASL,
			ConsumerSecret: opts.KafkaConsumerSecret, Tenancy: opts.KafkaTenancy},
		Connections: kafka.NewRegistry(opts.Kafka, opts.Clock),
		Scanner:     opts.Kafka,
		Producer:    opts.Kafka,
		Offsets:     offsets,
		Topics:      kafkastats.NewTopics(opts.Clock),
		Commits:     kafkastats.NewCommits(opts.Clock),
		Due:         kafkastats.NewDueOffsets(opts.Clock),
		Tallies:     kafkastats.NewTallies(offsets, opts.Kafka),
		ByPipeline:  &kafkastats.Counts{},
		Replayed:    &kafkastats.Replayed{},
	}
	// Whether PrometheusRule is served, shared by both controllers that apply alert rules.
	rules := ruleapi.New(mgr, opts.WatchNamespaces)
	// Each controller gets its own rate limiter: errors back off per resource from 0.5s up to the
	// resync interval (at most maxErrorBackoff), so a broker that comes back is noticed soon.
	// One compile per RetryPolicy generation, however many reconciles read it.
	policies := policy.NewCache(0)
	// One cache of the applies found unnecessary, its entries going by themselves.
	applied := apply.NewCache(opts.Clock, apply.DefaultCacheTTL)
	if opts.OperatorNamespace == "" {
		opts.OperatorNamespace = DefaultOperatorNamespace
	}
	ledger := &kafkaspec.Ledger{Reader: mgr.GetAPIReader(), Writer: c, Namespace: opts.OperatorNamespace, Clock: opts.Clock}
	// Secrets are read uncached, never through an informer (cache.go).
	c = secretsFromAPI{Client: c, api: mgr.GetAPIReader()}
	topics := func(name string) topicReconciler {
		return topicReconciler{
			Ledger:          ledger,
			Policies:        policies,
			Applied:         applied,
			Client:          c,
			Recorder:        boundedNotes{mgr.GetEventRecorder(name)},
			Kafka:           access,
			Clock:           opts.Clock,
			missing:         newMissingReferences(opts.Clock),
			Metrics:         metrics,
			RefreshInterval: opts.StatusRefreshInterval,
			DeletionTimeout: opts.DeletionTimeout,
			RuleLabels:      opts.AlertRuleLabels,
			RunbookBaseURL:  opts.AlertRunbookBaseURL,
			Rules:           rules,
			Controller: controller.Options{
				MaxConcurrentReconciles: opts.MaxConcurrentReconciles,
				RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](
					500*time.Millisecond, min(opts.StatusRefreshInterval, maxErrorBackoff)),
			},
		}
	}
	return &reconcilers{
		policy: &RetryPolicyReconciler{
			Policies: policies,
			Client:   c,
			Recorder: boundedNotes{mgr.GetEventRecorder("retrypolicy-controller")},
			Metrics:  metrics,
		},
		queue: &DeadLetterQueueReconciler{
			topicReconciler: topics("deadletterqueue-controller"),
			growth:          &growthHistory{},
			stateCounts:     &stateCountCache{},
		},
		pipeline: &ConsumerPipelineReconciler{
			topicReconciler:       topics("consumerpipeline-controller"),
			DispatcherImage:       opts.DispatcherImage,
			APIReader:             mgr.GetAPIReader(),
			CircuitReportInterval: opts.CircuitReportInterval,
			Autoscaler:            opts.Autoscaler,
			KEDAPrometheusAddress: opts.KEDAPrometheusAddress,
			keda:                  &kindServed{mapper: mgr.GetRESTMapper(), gvk: render.ScaledObjectGVK},
		},
		action: &DeadLetterActionReconciler{
			topicReconciler: topics("deadletteraction-controller"),
			Factory:         opts.Kafka,
			RunClock:        opts.ActionClock,
			runs:            newActionRuns(),
		},
		rules: rules,
	}, nil
}

// SetupWithManager registers every controller of the operator with mgr.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	rs, err := newReconcilers(mgr, mgr.GetClient(), opts)
	if err != nil {
		return err
	}
	if err := setupIndexes(ctx, mgr, rs.queue.Kafka.Defaults); err != nil {
		return fmt.Errorf("indexing: %w", err)
	}
	if r, ok := opts.Kafka.(manager.Runnable); ok {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("kafka client factory: %w", err)
		}
	}
	if err := mgr.Add(rs.rules); err != nil {
		return fmt.Errorf("alert rules: %w", err)
	}
	if err := mgr.Add(&ledgerSweeper{ledger: rs.queue.Ledger, api: mgr.GetAPIReader(), log: mgr.GetLogger().WithName("topic-ledger")}); err != nil {
		return fmt.Errorf("topic ledger sweeper: %w", err)
	}
	if err := rs.policy.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("retrypolicy controller: %w", err)
	}
	if err := rs.queue.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("deadletterqueue controller: %w", err)
	}
	if err := rs.pipeline.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("consumerpipeline controller: %w", err)
	}
	if err := rs.action.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("deadletteraction controller: %w", err)
	}
	return nil
}

// setupIndexes registers the field indexes of constants.go: the pipelines by the objects they
// reference and the claims of queue topics, of pipeline sources, consumer groups and tier bases, by
// name alone: a cluster is identified by the ID Kafka gives it, which no spec tells, so the checks
// keep, of the resources an index lists, those on their own cluster (claims_cluster.go).
func setupIndexes(ctx context.Context, mgr ctrl.Manager, d kafkaspec.Defaults) error {
	idx := mgr.GetFieldIndexer()
	for _, i := range []struct {
		obj   client.Object
		field string
		index func(client.Object) []string
	}{
		{&retryv1alpha1.ConsumerPipeline{}, indexPipelineByPolicy, func(o client.Object) []string {
			return []string{o.(*retryv1alpha1.ConsumerPipeline).Spec.RetryPolicyRef.Name}
		}},
		{&retryv1alpha1.ConsumerPipeline{}, indexPipelineByDLQ, func(o client.Object) []string {
			return []string{o.(*retryv1alpha1.ConsumerPipeline).Spec.DeadLetterQueueRef.Name}
		}},
		{&retryv1alpha1.DeadLetterQueue{}, indexDLQByClaim, func(o client.Object) []string {
			return []string{string(o.(*retryv1alpha1.DeadLetterQueue).Spec.Topic.Name)}
		}},
		{&retryv1alpha1.ConsumerPipeline{}, indexPipelineBySourceClaim, func(o client.Object) []string {
			return []string{string(o.(*retryv1alpha1.ConsumerPipeline).Spec.Source.Topic)}
		}},
		{&retryv1alpha1.ConsumerPipeline{}, indexPipelineByGroupClaim, func(o client.Object) []string {
			return []string{consumerGroup(o.(*retryv1alpha1.ConsumerPipeline))}
		}},
		{&retryv1alpha1.ConsumerPipeline{}, indexPipelineByTierClaim, func(o client.Object) []string {
			return []string{tierBase(o.(*retryv1alpha1.ConsumerPipeline), d)}
		}},
	} {
		if err := idx.IndexField(ctx, i.obj, i.field, i.index); err != nil {
			return fmt.Errorf("%s: %w", i.field, err)
		}
	}
	return nil
}

// requestsFor lists the objects of list's kind matching opts and returns a request for each of
// them but skip (nil: none skipped). A failed list is logged and yields none.
func requestsFor(ctx context.Context, c client.Reader, list client.ObjectList, skip client.Object, opts ...client.ListOption) []ctrl.Request {
	if err := c.List(ctx, list, opts...); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the objects to reconcile after a change failed")
		return nil
	}
	var out []ctrl.Request
	_ = meta.EachListItem(list, func(item runtime.Object) error {
		if o, ok := item.(client.Object); ok && (skip == nil || o.GetUID() != skip.GetUID()) {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
		return nil
	})
	return out
}

// specOrLifecycleChanged passes creations, deletions and updates that change the spec (generation),
// the annotations (but for those the operator writes itself) or the deletion timestamp. It drops
// the updates this operator's own writes cause (status, finalizer, its annotations), which would
// otherwise trigger a second, idle reconcile that, on a cache not yet up to date, would even write
// the same status again.
func specOrLifecycleChanged() predicate.Predicate {
	return predicate.Or(
		predicate.GenerationChangedPredicate{},
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero() ||
				!maps.Equal(userAnnotations(e.ObjectOld), userAnnotations(e.ObjectNew))
		}},
	)
}

// userAnnotations are the annotations of o but those the operator writes.
func userAnnotations(o client.Object) map[string]string {
	a := o.GetAnnotations()
	if _, ok := a[annotationDeletionFailure]; !ok {
		return a
	}
	a = maps.Clone(a)
	delete(a, annotationDeletionFailure)
	return a
}

// createdOrDeleted passes only creations and deletions.
func createdOrDeleted() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}
