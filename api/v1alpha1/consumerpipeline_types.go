package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RetryTopicNaming says how retry-tier topics are named and shared.
// +kubebuilder:validation:Enum=ByAttempt;ByDelay
type RetryTopicNaming string

// The retry-tier naming strategies.
const (
	// NamingByAttempt makes one tier per retry, named <base>.retry.<n>, where <base> is the
	// pipeline's own (see RetryTopics).
	NamingByAttempt RetryTopicNaming = "ByAttempt"
	// NamingByDelay names tiers by their delay, <base>.retry.<delay> (such as team-a.chat.retry.5m),
	// and consecutive retries with equal delays share one tier, as Spring Kafka reuses its last topic.
	NamingByDelay RetryTopicNaming = "ByDelay"
)

// DeliveryOrdering says whether records of one partition are delivered in order.
// +kubebuilder:validation:Enum=Ordered;Unordered
type DeliveryOrdering string

// The delivery orderings.
const (
	// OrderingOrdered delivers the records of a source partition one at a time, in offset order. A
	// retry tier's records, out of order with their source by nature, are each delivered at their
	// own due time.
	OrderingOrdered DeliveryOrdering = "Ordered"
	// OrderingUnordered delivers up to delivery.maxInFlight records at once, in any order.
	OrderingUnordered DeliveryOrdering = "Unordered"
)

// CircuitState is the state of a circuit breaker.
// +kubebuilder:validation:Enum=Closed;Open;HalfOpen
type CircuitState string

// The circuit breaker states.
const (
	// CircuitClosed lets deliveries through.
	CircuitClosed CircuitState = "Closed"
	// CircuitOpen pauses consumption.
	CircuitOpen CircuitState = "Open"
	// CircuitHalfOpen lets a few probe deliveries through.
	CircuitHalfOpen CircuitState = "HalfOpen"
)

// ConsumerPipelineSpec binds a source topic and consumer group to a retry policy, a dead letter queue
// and a consumer.
// +kubebuilder:validation:XValidation:rule="has(self.sink) != has(self.template)",message="set exactly one of sink (the operator's dispatcher delivers records to your HTTP endpoint) or template (your own consumer pod, with the configuration injected)"
type ConsumerPipelineSpec struct {
	// source is the topic consumed and the consumer group that consumes it.
	// +required
	Source PipelineSource `json:"source"`

	// retryPolicyRef names the RetryPolicy, in the same namespace, that governs retries.
	// +required
	RetryPolicyRef LocalObjectReference `json:"retryPolicyRef"`

	// deadLetterQueueRef names the DeadLetterQueue, in the same namespace, that receives records that
	// cannot be delivered.
	// +required
	DeadLetterQueueRef LocalObjectReference `json:"deadLetterQueueRef"`

	// retryTopics says how the retry-tier topics are named and sized. Absent means ByAttempt naming
	// with as many partitions as the source topic.
	// +optional
	RetryTopics *RetryTopics `json:"retryTopics,omitempty"`

	// delivery bounds concurrency and says whether order is kept. Absent means Ordered with at most
	// 100 records in flight.
	// +optional
	Delivery *Delivery `json:"delivery,omitempty"`

	// sink is the HTTP endpoint the operator's dispatcher delivers each record to. Exactly one of sink
	// and template is set.
	// +optional
	Sink *Sink `json:"sink,omitempty"`

	// template is your own consumer pod; the operator injects the pipeline's configuration as
	// environment variables and a mounted config file. Exactly one of sink and template is set. Its
	// spec is a core/v1 PodSpec, validated when the Deployment is created.
	// +optional
	Template *PodTemplate `json:"template,omitempty"`

	// replicas is the number of consumer pods. Defaults to 1. More replicas than source partitions
	// leaves the extra ones idle. It is also the pipeline's scale subresource: `kubectl scale cpl`,
	// an HorizontalPodAutoscaler or a KEDA ScaledObject may set it, and the operator follows it in
	// the consumer Deployment without ever writing it back. When something else scales the pipeline,
	// leave replicas out of the manifests kept in Git (or have the GitOps tool ignore
	// /spec/replicas).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// autoscaling makes the operator scale the pipeline on its due lag (status.dueLag): it creates a
	// KEDA ScaledObject when KEDA is installed, else an autoscaling/v2 HorizontalPodAutoscaler on the
	// external metric retryops_consumerpipeline_due_lag, which the operator serves itself. Either
	// targets the pipeline's scale subresource, so spec.replicas becomes the autoscaler's: leave it
	// out of Git. Absent: the pipeline runs spec.replicas pods and the operator removes the
	// autoscaler it made.
	// +optional
	Autoscaling *PipelineAutoscaling `json:"autoscaling,omitempty"`

	// alerts are the thresholds of the pipeline's alert rules. Absent fields take the documented
	// defaults.
	// +optional
	Alerts *PipelineAlerts `json:"alerts,omitempty"`

	// kafka is the connection to the cluster that holds the source topic. Absent or empty means the
	// operator-wide default. The dead letter topic lives on the DeadLetterQueue's connection.
	// +optional
	Kafka *KafkaConnection `json:"kafka,omitempty"`
}

// PipelineSource is the topic a pipeline consumes.
// +kubebuilder:validation:XValidation:rule="has(self.consumerGroup) == has(oldSelf.consumerGroup) && (!has(self.consumerGroup) || self.consumerGroup == oldSelf.consumerGroup)",message="source.consumerGroup is immutable: changing it would restart consumption from scratch; create a new ConsumerPipeline instead"
type PipelineSource struct {
	// topic is the Kafka topic consumed. Immutable. Under the manager's topic claim policy
	// (--topic-prefix) it must be one the policy gives the namespace, created by the operator or not.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="source.topic is immutable; create a new ConsumerPipeline for another topic"
	// +required
	Topic TopicName `json:"topic"`

	// consumerGroup is the Kafka consumer group. Defaults to <namespace>.<name> of the pipeline.
	// Immutable. Under the manager's group claim policy (--group-prefix, by default --topic-prefix)
	// it must start with the namespace's prefix.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=249
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+$`
	// +optional
	ConsumerGroup string `json:"consumerGroup,omitempty"`

	// create makes the operator create the topic when it does not exist. Absent means the topic must
	// already exist; the pipeline waits for it. When several pipelines on one source set it, the
	// first to record the topic in the operator's topic ledger owns it (creates, grows and
	// configures it) and the others consume it as it is. No pipeline ever deletes its source.
	// +optional
	Create *TopicCreation `json:"create,omitempty"`
}

// TopicCreation is how the operator creates a topic.
type TopicCreation struct {
	// partitions of the topic. May only grow. Defaults to 3.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="partitions may only grow: Kafka cannot remove partitions"
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// replicationFactor of the topic. Absent means the broker's default.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	ReplicationFactor *int32 `json:"replicationFactor,omitempty"`

	// config holds extra topic configs.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Config map[string]string `json:"config,omitempty"`

	// existingTopic is what happens when the topic exists and the operator did not create it (for
	// this pipeline): Refuse (the default) consumes it but never changes its configs or partitions
	// nor deletes it; Adopt manages it as if created here, which the manager allows only for names
	// its topic claim policy gives this namespace (--topic-prefix), and never for a topic the
	// operator manages for another resource (reason TopicConflict; pipelines sharing a source are
	// the exception: one of them manages it).
	// +kubebuilder:default=Refuse
	// +optional
	ExistingTopic ExistingTopic `json:"existingTopic,omitempty"`
}

// RetryTopics says how retry tiers are named and sized. The tiers belong to the pipeline, never to
// its source, so several pipelines on one source never share one: they are named
// <base>.retry.<suffix>, where <base> is <namespace>.<name> of the pipeline, or, under the manager's
// topic claim policy (--topic-prefix), the prefix resolved for the namespace followed by <name>
// when the policy contains {namespace} ("{namespace}." gives team-a.chat) and by
// <namespace>.<name> otherwise. A base over 209 characters keeps the prefix and is cut to fit with
// "-" and 10 hex digits of the SHA-256 of the whole base.
type RetryTopics struct {
	// naming is ByAttempt (<base>.retry.<n>, one tier per retry; the default) or ByDelay
	// (<base>.retry.<delay>; consecutive retries with equal delays share a tier).
	// +kubebuilder:default=ByAttempt
	// +optional
	Naming RetryTopicNaming `json:"naming,omitempty"`

	// partitions of each retry tier. May only grow. Absent means as many as the source topic.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="retryTopics.partitions may only grow: Kafka cannot remove partitions"
	// +optional
	Partitions *int32 `json:"partitions,omitempty"`

	// replicationFactor of each retry tier. Absent means the broker's default.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +optional
	ReplicationFactor *int32 `json:"replicationFactor,omitempty"`

	// deletionPolicy says what happens to retry tiers the pipeline no longer needs (after a policy
	// change or when the pipeline is deleted): Retain (the default) reports and keeps them, Delete
	// deletes them.
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// Delivery bounds how records are handed to the consumer.
type Delivery struct {
	// ordering is Ordered (the records of a source partition one at a time, in order; the default)
	// or Unordered (up to maxInFlight at once, in any order). Either way a retry tier delivers each
	// record at its own due time.
	// +kubebuilder:default=Ordered
	// +optional
	Ordering DeliveryOrdering `json:"ordering,omitempty"`

	// maxInFlight bounds the deliveries under way at once in one consumer pod, over all partitions.
	// Defaults to 100.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxInFlight *int32 `json:"maxInFlight,omitempty"`

	// batch delivers records in batches when set: one POST carries up to maxRecords records (a
	// retryops.dev/batch/v1 document) and the sink answers a result per record; each record then gets
	// the fate it would get alone (delivered, retried at its own due time, dead-lettered with its own
	// reason). Absent: one request per record.
	// maxInFlight counts records, not batches: with the default maxInFlight 100 and maxRecords 100,
	// one batch is in flight at a time; set maxInFlight to maxRecords times the batches wanted in
	// flight. The policy's attemptTimeout covers a whole batch (one request), so it must fit
	// maxRecords records. A record whose deadline passes while it waits for its batch to fill is
	// dead-lettered (deadline_exceeded) without being sent. A sink answering a batch with 415
	// does not take batches: every record is retried (error type BatchNotSupported) whatever the
	// policy says of a 4xx, waiting in the tiers for the sink or this field to be fixed, up to the
	// policy's maxAttempts and deadline (then dead-lettered max_retries_exceeded or
	// deadline_exceeded).
	// +optional
	Batch *DeliveryBatch `json:"batch,omitempty"`
}

// DeliveryBatch bounds the batches of a pipeline that delivers in batches.
type DeliveryBatch struct {
	// maxRecords is the most records in one batch. Defaults to 100.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxRecords *int32 `json:"maxRecords,omitempty"`

	// maxBytes bounds the body of one batch request as sent: the JSON document, with each
	// record's escaped or base64 key, value and headers and its fields (a single record larger
	// than it goes alone). Defaults to 1Mi; at most 16Mi.
	// +kubebuilder:validation:XValidation:rule="quantity(self).isGreaterThan(quantity('0')) && quantity(self).compareTo(quantity('16Mi')) <= 0",message="delivery.batch.maxBytes must be more than 0 and at most 16Mi"
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`

	// maxWait is the longest a record waits for its batch to fill before the batch goes as it is.
	// Defaults to 50ms; at most 10s.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('10s')",message="delivery.batch.maxWait must be between 0s and 10s"
	// +optional
	MaxWait *metav1.Duration `json:"maxWait,omitempty"`
}

// ServiceKind is the kind of object a sink reference names.
// +kubebuilder:validation:Enum=Service
type ServiceKind string

// Sink is where the dispatcher POSTs each record: a URL or a Service.
// +kubebuilder:validation:XValidation:rule="has(self.uri) != has(self.ref)",message="set exactly one of sink.uri and sink.ref"
type Sink struct {
	// uri is the http or https URL that receives each record as a POST.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https') && url(self).getHostname() != ''",message="sink.uri must be an absolute http:// or https:// URL"
	// +optional
	URI string `json:"uri,omitempty"`

	// ref names a Service in the pipeline's namespace that receives each record.
	// +optional
	Ref *SinkReference `json:"ref,omitempty"`
}

// SinkReference is a Service that receives records.
type SinkReference struct {
	// kind of the object; only Service. Defaults to Service.
	// +kubebuilder:default=Service
	// +optional
	Kind ServiceKind `json:"kind,omitempty"`

	// name of the Service, in the pipeline's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// port of the Service. Defaults to 80.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// path of the request, starting with "/". Defaults to "/".
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:Pattern=`^/[^\s]*$`
	// +optional
	Path string `json:"path,omitempty"`
}

// PodTemplate is the user's own consumer pod.
type PodTemplate struct {
	// metadata holds labels and annotations added to the pods.
	// +optional
	Metadata *PodTemplateMetadata `json:"metadata,omitempty"`

	// spec is a core/v1 PodSpec. It is stored as given and validated by the API server when the
	// operator creates the Deployment; a rejected spec shows on the pipeline's DeploymentReady
	// condition.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +required
	Spec corev1.PodSpec `json:"spec"`
}

// PodTemplateMetadata is the part of object metadata a pod template may set.
type PodTemplateMetadata struct {
	// labels added to the pods.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations added to the pods.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PipelineAlerts are the thresholds of a pipeline's alerts.
type PipelineAlerts struct {
	// maxConsumerLag alerts when the source topic's lag stays above this for the alert duration.
	// Defaults to 1000.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConsumerLag *int64 `json:"maxConsumerLag,omitempty"`

	// maxRetryBacklog alerts when the records waiting in retry tiers stay above this for the alert
	// duration. Defaults to 1000.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxRetryBacklog *int64 `json:"maxRetryBacklog,omitempty"`

	// for is how long a threshold must be exceeded before an alert fires. Defaults to 5m.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	For *metav1.Duration `json:"for,omitempty"`
}

// ConsumerPipelineStatus is the live state of a pipeline.
type ConsumerPipelineStatus struct {
	// conditions are TopicsReady, DeploymentReady, AlertsReady, CircuitClosed, and Ready summarising them.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// consumerGroup is the consumer group in use (spec.source.consumerGroup or its default).
	// +kubebuilder:validation:MaxLength=249
	// +optional
	ConsumerGroup string `json:"consumerGroup,omitempty"`

	// kafkaClusterID is the cluster ID Kafka's Metadata last reported for this resource's
	// connection; the operator tells clusters apart by it, and goes by it while the brokers cannot
	// be asked. Unset until the connection first reaches Kafka.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	KafkaClusterID string `json:"kafkaClusterID,omitempty"`

	// topics are the source, retry and dead letter topics.
	// +optional
	Topics *PipelineTopics `json:"topics,omitempty"`

	// replicas is the number of consumer pods the Deployment runs (its status.replicas): what the
	// scale subresource reports as the current scale.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// selector is the label selector of the consumer pods, as a string (app.kubernetes.io/name=...,
	// ...): what the scale subresource gives an autoscaler to find the pods. Unset until the
	// Deployment is applied.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Selector string `json:"selector,omitempty"`

	// readyReplicas is the number of consumer pods ready.
	// +optional
	ReadyReplicas *int32 `json:"readyReplicas,omitempty"`

	// consumerLag is the number of source records not yet consumed by the group.
	// +optional
	ConsumerLag *int64 `json:"consumerLag,omitempty"`

	// retryBacklog is the number of records waiting in retry tiers.
	// +optional
	RetryBacklog *int64 `json:"retryBacklog,omitempty"`

	// dueLag is the work the consumers could do now: the source records the group has not
	// consumed (consumerLag) plus the retry-tier records whose due time has passed, not those still
	// waiting for it, plus every record of a draining tier. A tier record counts as due once its
	// Kafka timestamp is older than the tier's longest delay (jitter included): its due time is at
	// the latest then; a record a DeadLetterAction Replay wrote counts as due when written. Read
	// with the other figures, so at most one refresh interval old.
	// +kubebuilder:validation:Minimum=0
	// +optional
	DueLag *int64 `json:"dueLag,omitempty"`

	// deadLetterMessages is the number of dead letters from this pipeline held in its dead letter
	// queue.
	// +optional
	DeadLetterMessages *int64 `json:"deadLetterMessages,omitempty"`

	// circuit is the circuit breaker state the consumers report: Open when any consumer pod's
	// breaker is open, else HalfOpen when any is half-open, else Closed. Each pod reports through
	// the ConfigMap <name>-dispatcher-circuit, which its ServiceAccount may get and patch and
	// nothing else; a report a pod stopped repeating is ignored after three report intervals.
	// Unset when the RetryPolicy has no circuit breaker. The CircuitClosed condition says which
	// pods report what since when.
	// +optional
	Circuit CircuitState `json:"circuit,omitempty"`

	// autoscaling is what the autoscaler made for spec.autoscaling does; unset without it.
	// +optional
	Autoscaling *PipelineAutoscalingStatus `json:"autoscaling,omitempty"`
}

// ConsumerPipeline binds a Kafka source topic and consumer group to a RetryPolicy, a DeadLetterQueue
// and a consumer (an HTTP sink served by the operator's dispatcher, or your own pod). The operator
// makes the retry-tier topics, the consumer Deployment, its configuration and alert rules.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=cpl,categories=retryops
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source.topic`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.retryPolicyRef.name`
// +kubebuilder:printcolumn:name="DLQ",type=string,JSONPath=`.spec.deadLetterQueueRef.name`
// +kubebuilder:printcolumn:name="Ready Pods",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Lag",type=integer,JSONPath=`.status.consumerLag`
// +kubebuilder:printcolumn:name="Retrying",type=integer,JSONPath=`.status.retryBacklog`
// +kubebuilder:printcolumn:name="Due",type=integer,JSONPath=`.status.dueLag`,priority=1
// +kubebuilder:printcolumn:name="Wakes",type=string,JSONPath=`.status.autoscaling.wakeTime`,priority=1
// +kubebuilder:printcolumn:name="DLQ Msgs",type=integer,JSONPath=`.status.deadLetterMessages`
// +kubebuilder:printcolumn:name="Circuit",type=string,JSONPath=`.status.circuit`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ConsumerPipeline struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired pipeline.
	// +required
	Spec ConsumerPipelineSpec `json:"spec"`

	// status is the live state of the pipeline.
	// +optional
	Status ConsumerPipelineStatus `json:"status,omitempty"`
}

// ConsumerPipelineList is a list of ConsumerPipeline.
// +kubebuilder:object:root=true
type ConsumerPipelineList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the ConsumerPipelines.
	Items []ConsumerPipeline `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &ConsumerPipeline{}, &ConsumerPipelineList{})
}
