// Package opmetrics defines the operator's own Prometheus metrics: the live figures of the resources
// (dead letter counts and ages, consumer lag, retry backlog, ready consumers) that the controllers
// also write into status. names.go is the contract with the alert-rule generator (internal/render):
// every name and label is a constant here and All lists them, so that a generated rule can be checked
// against what is really exported (internal/promcheck; a new metric, see sdk/metrics). The data
// plane's metrics are in sdk/metrics.
//
// # The namespace label
//
// Every metric carries the label "namespace": the namespace of the resource it describes (not of the
// operator pod). Prometheus adds the scraped target's namespace as a target label "namespace" too,
// and on a clash it keeps the target's value and renames the scraped one to "exported_namespace",
// unless the scrape sets honor_labels. The operator's ServiceMonitor (or scrape job) must therefore
// set honorLabels: true (honor_labels: true); the operator's metrics carry no job or instance label,
// so honouring labels changes nothing else. The alert rules select {namespace="<ns>", <kind>="<name>"}
// and rely on it. The resource's name is under a label named after its kind (deadletterqueue,
// consumerpipeline, retrypolicy).
package opmetrics

// Metric names. All are gauges.
const (
	// DeadLetterQueueMessages is the number of dead letters the queue's topic holds (labels
	// namespace, deadletterqueue).
	DeadLetterQueueMessages = "retryops_deadletterqueue_messages"
	// DeadLetterQueueOldestMessageTimestamp is the Kafka timestamp, in Unix seconds, of the oldest
	// pending dead letter the queue holds, one no DeadLetterAction replayed, resolved or ignored (the
	// oldest of all until the record of decisions is counted; labels namespace, deadletterqueue).
	// Absent while none is pending.
	DeadLetterQueueOldestMessageTimestamp = "retryops_deadletterqueue_oldest_message_timestamp_seconds"
	// DeadLetterQueueMessagesByReason is the number of dead letters held, by their reason header
	// (labels namespace, deadletterqueue, reason).
	DeadLetterQueueMessagesByReason = "retryops_deadletterqueue_messages_by_reason"
	// ConsumerPipelineConsumerLag is the number of source-topic records the pipeline's consumer group
	// has not consumed yet (labels namespace, consumerpipeline).
	ConsumerPipelineConsumerLag = "retryops_consumerpipeline_consumer_lag"
	// ConsumerPipelineRetryBacklog is the number of records waiting in the pipeline's retry tiers
	// (labels namespace, consumerpipeline).
	ConsumerPipelineRetryBacklog = "retryops_consumerpipeline_retry_backlog"
	// ConsumerPipelineDueLag is the pipeline's due lag: the source records its group has not
	// consumed plus the retry-tier records already due (labels namespace, consumerpipeline); what
	// an autoscaler scales the pipeline on.
	ConsumerPipelineDueLag = "retryops_consumerpipeline_due_lag"
	// ConsumerPipelineDeadLetterMessages is the number of dead letters from the pipeline held in its
	// dead letter queue (labels namespace, consumerpipeline).
	ConsumerPipelineDeadLetterMessages = "retryops_consumerpipeline_dead_letter_messages"
	// ConsumerPipelineReadyReplicas is the number of ready consumer pods of the pipeline (labels
	// namespace, consumerpipeline).
	ConsumerPipelineReadyReplicas = "retryops_consumerpipeline_ready_replicas"
	// ConsumerPipelineCircuitState is the pipeline's circuit breaker state as its consumers report it:
	// 0 Closed, 1 HalfOpen, 2 Open, the values of the dispatcher's retryops_dispatcher_circuit_state
	// (labels namespace, consumerpipeline). Absent when the policy has no circuit breaker.
	ConsumerPipelineCircuitState = "retryops_consumerpipeline_circuit_state"
	// RetryPolicyDeadLetterMessages is the number of dead letters held from the pipelines that use
	// the policy (labels namespace, retrypolicy).
	RetryPolicyDeadLetterMessages = "retryops_retrypolicy_dead_letter_messages"
)

// Label names.
const (
	// LabelNamespace is the namespace of the resource (see the package documentation on
	// honorLabels).
	LabelNamespace = "namespace"
	// LabelDeadLetterQueue is the name of a DeadLetterQueue.
	LabelDeadLetterQueue = "deadletterqueue"
	// LabelConsumerPipeline is the name of a ConsumerPipeline.
	LabelConsumerPipeline = "consumerpipeline"
	// LabelRetryPolicy is the name of a RetryPolicy.
	LabelRetryPolicy = "retrypolicy"
	// LabelReason is a dead-letter reason (non_retriable_error, max_retries_exceeded,
	// deadline_exceeded, undeliverable).
	LabelReason = "reason"
)

// Desc describes one exported metric.
type Desc struct {
	// Name is the metric name.
	Name string
	// Type is always gauge.
	Type string
	// Help is the metric's help text.
	Help string
	// Labels are the metric's label names, in order.
	Labels []string
}

var (
	dlqLabels       = []string{LabelNamespace, LabelDeadLetterQueue}
	dlqReasonLabels = []string{LabelNamespace, LabelDeadLetterQueue, LabelReason}
	pipelineLabels  = []string{LabelNamespace, LabelConsumerPipeline}
	policyLabels    = []string{LabelNamespace, LabelRetryPolicy}
)

// All lists every metric the operator exports.
var All = []Desc{
	{DeadLetterQueueMessages, "gauge", "Dead letters held in the DeadLetterQueue's topic.", dlqLabels},
	{DeadLetterQueueOldestMessageTimestamp, "gauge", "Kafka timestamp (Unix seconds) of the oldest pending dead letter held (not replayed, resolved or ignored); absent while none is pending.", dlqLabels},
	{DeadLetterQueueMessagesByReason, "gauge", "Dead letters held in the DeadLetterQueue's topic, by reason.", dlqReasonLabels},
	{ConsumerPipelineConsumerLag, "gauge", "Source-topic records the ConsumerPipeline's consumer group has not consumed yet.", pipelineLabels},
	{ConsumerPipelineRetryBacklog, "gauge", "Records waiting in the ConsumerPipeline's retry tiers.", pipelineLabels},
	{ConsumerPipelineDueLag, "gauge", "Records the ConsumerPipeline's consumers could process now: source records not consumed plus retry-tier records already due.", pipelineLabels},
	{ConsumerPipelineDeadLetterMessages, "gauge", "Dead letters from the ConsumerPipeline held in its DeadLetterQueue.", pipelineLabels},
	{ConsumerPipelineReadyReplicas, "gauge", "Ready consumer pods of the ConsumerPipeline.", pipelineLabels},
	{ConsumerPipelineCircuitState, "gauge", "Circuit breaker state the ConsumerPipeline's consumers report: 0 closed, 1 half-open, 2 open.", pipelineLabels},
	{RetryPolicyDeadLetterMessages, "gauge", "Dead letters held from the ConsumerPipelines that use the RetryPolicy.", policyLabels},
}

// Exported reports whether name is a metric the operator exports.
func Exported(name string) bool {
	for _, d := range All {
		if d.Name == name {
			return true
		}
	}
	return false
}
