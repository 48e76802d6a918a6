// Package metrics defines the data plane's Prometheus metrics. names.go is the contract with the
// alert-rule generator: every metric name and label the dispatcher (and the library mode) exports is
// a constant here, and All lists them, so that a generated rule can be checked against what is
// really exported.
//
// Every metric carries the label "pipeline": the ConsumerPipeline's name (config.PipelineLabel). The
// namespace is not a metric label: Prometheus adds the scraped pod's namespace as the target label
// "namespace", so a rule selects {namespace="<ns>", pipeline="<name>"}.
//
// A new metric is named here (the operator's own in internal/opmetrics). An alert rule
// (internal/render) or a dashboard panel (internal/dashboard) may only use a metric one of the two
// exports: both packages' tests check their queries with internal/promcheck. After a panel
// changes, `make dashboard` writes the dashboard again.
package metrics

// Metric names.
const (
	// RecordsTotal counts records finished, by outcome (counter; labels pipeline, outcome).
	RecordsTotal = "retryops_dispatcher_records_total"
	// DeliveryAttemptsTotal counts deliveries to the sink, by attempt number and result (counter;
	// labels pipeline, attempt, result).
	DeliveryAttemptsTotal = "retryops_dispatcher_delivery_attempts_total"
	// DeliveryDurationSeconds is the time one delivery took (histogram; label pipeline).
	DeliveryDurationSeconds = "retryops_dispatcher_delivery_duration_seconds"
	// RetryLatenessSeconds is how late a retry was delivered: delivery start minus due time
	// (histogram; label pipeline).
	RetryLatenessSeconds = "retryops_dispatcher_retry_lateness_seconds"
	// InFlight is the number of records being delivered or written to a retry tier or the dead
	// letter queue (gauge; label pipeline).
	InFlight = "retryops_dispatcher_in_flight"
	// Uncommitted is the number of records finished but not yet committed (gauge; label pipeline):
	// at most delivery.maxUncommittedRecords. InFlight + Uncommitted is what a crash would redeliver.
	Uncommitted = "retryops_dispatcher_uncommitted_records"
	// Buffered is the number of records fetched and waiting for delivery, retry-tier records not yet
	// due included (gauge; label pipeline).
	Buffered = "retryops_dispatcher_buffered_records"
	// CircuitState is the circuit breaker state: 0 closed, 1 half-open, 2 open (gauge; label
	// pipeline). Always 0 without a breaker.
	CircuitState = "retryops_dispatcher_circuit_state"
	// ConsumerLag is the partition's high watermark minus the next offset to commit (gauge; labels
	// pipeline, topic, partition), for the source topic and every retry tier.
	ConsumerLag = "retryops_dispatcher_consumer_lag"
	// DeadLettersTotal counts records written to the dead letter queue, by reason (counter; labels
	// pipeline, reason).
	DeadLettersTotal = "retryops_dispatcher_dead_letters_total"
	// ProduceErrorsTotal counts failed writes to a retry tier or the dead letter queue (counter;
	// labels pipeline, kind). A failed dead-letter write is retried a few times, then written
	// stripped to its retryops headers, then counted in StuckDeadLetters; the partition's commits wait.
	ProduceErrorsTotal = "retryops_dispatcher_produce_errors_total"
	// CommitErrorsTotal counts failed offset commits (counter; label pipeline).
	CommitErrorsTotal = "retryops_dispatcher_commit_errors_total"
	// PausedPartitions is the number of partitions whose fetching is paused (gauge; label pipeline).
	PausedPartitions = "retryops_dispatcher_paused_partitions"
	// PanicsTotal counts panics recovered while processing a record (counter; label pipeline): the
	// record is dead-lettered (reason undeliverable, error type Panic) and the worker goes on.
	PanicsTotal = "retryops_dispatcher_panics_total"
	// RedeliveriesTotal counts records fetched again at an offset this process had already started
	// delivering in that partition (counter; label pipeline): after a rebalance handed a partition
	// back, or a fetch position reset below it. Each is delivered again: a duplicate the sink sees
	// (Idempotency-Key is the same). Redeliveries after a crash happen in the next process and are
	// bounded by the in-flight and uncommitted gauges at the crash.
	RedeliveriesTotal = "retryops_dispatcher_redeliveries_total"
	// ReparkedTotal counts retry-tier records written again to the tail of their tier (counter;
	// label pipeline): a record due later than its tier's longest delay (a long Retry-After, a
	// policy since shortened) that would hold up the records behind it. Each is delivered when due.
	ReparkedTotal = "retryops_dispatcher_reparked_total"
	// StuckDeadLetters is the number of records whose dead-letter write failed even stripped to its
	// coordinates and reason (gauge; label pipeline): nothing past them is committed in their
	// partitions, the write is retried slowly, and the dispatcher is not ready while any is stuck.
	StuckDeadLetters = "retryops_dispatcher_stuck_dead_letters"
	// Ready is 1 once the consumer joined its group and until it stops (gauge; label pipeline).
	Ready = "retryops_dispatcher_ready"
	// KafkaConnectionFailuresTotal counts failures of the consumer's Kafka connection that retrying
	// does not fix, by reason: authentication (SASL refused), tls (handshake or certificate, or TLS
	// on one side only), authorization (an ACL refused reading, joining, writing) (counter; labels
	// pipeline, reason). Every failed connection attempt, fetch, group session, commit or write counts.
	KafkaConnectionFailuresTotal = "retryops_dispatcher_kafka_connection_failures_total"
	// KafkaConnectionFailing is 1 while a failure of that reason persists, 0 once a successful
	// connection, fetch, join, commit or write cleared it (gauge; labels pipeline, reason). The
	// dispatcher is not ready while any is 1, and reports it to the operator (the pipeline's
	// DeploymentReady condition).
	KafkaConnectionFailing = "retryops_dispatcher_kafka_connection_failing"
	// BatchesTotal counts batches delivered (delivery.batch), by result: success (every record
	// succeeded), partial (some did), failure (none did) (counter; labels pipeline, result). The
	// records of a batch are counted one by one in RecordsTotal and DeliveryAttemptsTotal as well.
	BatchesTotal = "retryops_dispatcher_batches_total"
	// BatchSize is the number of records of a batch delivered (histogram; label pipeline).
	BatchSize = "retryops_dispatcher_batch_size"
	// BatchDurationSeconds is the time one batch delivery took (histogram; label pipeline).
	BatchDurationSeconds = "retryops_dispatcher_batch_duration_seconds"
	// BatchAnswerProblemsTotal counts what the sink's answers to batches got wrong, by problem
	// (counter; labels pipeline, problem): results for ids not in the request (unknown_id),
	// repeated word for word (duplicate_id) or disagreeing (conflicting_id, counted once per
	// record), with an httpStatus dropped (invalid_status) or a status neither success nor failure
	// (invalid_result); whole answers over the size limit (too_large) or not a document of the
	// version sent (invalid), or a 415 refusing batches (not_supported). None of them acknowledges
	// a record.
	BatchAnswerProblemsTotal = "retryops_dispatcher_batch_answer_problems_total"
)

// Label names.
const (
	LabelPipeline  = "pipeline"
	LabelOutcome   = "outcome"
	LabelAttempt   = "attempt"
	LabelResult    = "result"
	LabelTopic     = "topic"
	LabelPartition = "partition"
	LabelReason    = "reason"
	LabelKind      = "kind"
	LabelProblem   = "problem"
)

// Values of the outcome label of RecordsTotal.
const (
	OutcomeSuccess      = "success"
	OutcomeRetried      = "retried"
	OutcomeDeadLettered = "dead_lettered"
	OutcomeDropped      = "dropped"
)

// Values of the result label of DeliveryAttemptsTotal.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
)

// ResultPartial is the result of a batch some records of which succeeded (BatchesTotal, which
// also takes ResultSuccess and ResultFailure).
const ResultPartial = "partial"

// Values of the problem label of BatchAnswerProblemsTotal.
const (
	ProblemUnknownID     = "unknown_id"
	ProblemDuplicateID   = "duplicate_id"
	ProblemConflictingID = "conflicting_id"
	ProblemInvalidStatus = "invalid_status"
	ProblemInvalidResult = "invalid_result"
	ProblemTooLarge      = "too_large"
	ProblemInvalid       = "invalid"
	ProblemNotSupported  = "not_supported"
)

// Values of the reason label of KafkaConnectionFailuresTotal and KafkaConnectionFailing.
const (
	KafkaReasonAuthentication = "authentication"
	KafkaReasonTLS            = "tls"
	KafkaReasonAuthorization  = "authorization"
)

// Values of the kind label of ProduceErrorsTotal.
const (
	KindRetry      = "retry"
	KindDeadLetter = "dead_letter"
)

// Values of CircuitState.
const (
	CircuitClosed   = 0
	CircuitHalfOpen = 1
	CircuitOpen     = 2
)

// Desc describes one exported metric.
type Desc struct {
	// Name is the metric name.
	Name string
	// Type is counter, gauge or histogram.
	Type string
	// Labels are the metric's label names (histograms add le, _sum and _count as usual).
	Labels []string
}

// All lists every metric the data plane exports.
var All = []Desc{
	{RecordsTotal, "counter", []string{LabelPipeline, LabelOutcome}},
	{DeliveryAttemptsTotal, "counter", []string{LabelPipeline, LabelAttempt, LabelResult}},
	{DeliveryDurationSeconds, "histogram", []string{LabelPipeline}},
	{RetryLatenessSeconds, "histogram", []string{LabelPipeline}},
	{InFlight, "gauge", []string{LabelPipeline}},
	{Uncommitted, "gauge", []string{LabelPipeline}},
	{Buffered, "gauge", []string{LabelPipeline}},
	{CircuitState, "gauge", []string{LabelPipeline}},
	{ConsumerLag, "gauge", []string{LabelPipeline, LabelTopic, LabelPartition}},
	{DeadLettersTotal, "counter", []string{LabelPipeline, LabelReason}},
	{ProduceErrorsTotal, "counter", []string{LabelPipeline, LabelKind}},
	{CommitErrorsTotal, "counter", []string{LabelPipeline}},
	{PausedPartitions, "gauge", []string{LabelPipeline}},
	{Ready, "gauge", []string{LabelPipeline}},
	{PanicsTotal, "counter", []string{LabelPipeline}},
	{StuckDeadLetters, "gauge", []string{LabelPipeline}},
	{RedeliveriesTotal, "counter", []string{LabelPipeline}},
	{ReparkedTotal, "counter", []string{LabelPipeline}},
	{KafkaConnectionFailuresTotal, "counter", []string{LabelPipeline, LabelReason}},
	{KafkaConnectionFailing, "gauge", []string{LabelPipeline, LabelReason}},
	{BatchesTotal, "counter", []string{LabelPipeline, LabelResult}},
	{BatchSize, "histogram", []string{LabelPipeline}},
	{BatchDurationSeconds, "histogram", []string{LabelPipeline}},
	{BatchAnswerProblemsTotal, "counter", []string{LabelPipeline, LabelProblem}},
}

// Exported reports whether name is a metric the data plane exports, accepting a histogram's
// _bucket, _sum and _count series.
func Exported(name string) bool {
	for _, d := range All {
		if name == d.Name {
			return true
		}
		if d.Type == "histogram" && (name == d.Name+"_bucket" || name == d.Name+"_sum" || name == d.Name+"_count") {
			return true
		}
	}
	return false
}
