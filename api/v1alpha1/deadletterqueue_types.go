package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeadLetterQueueSpec declares a dead letter topic, how long it keeps records and when to alert.
// +kubebuilder:validation:XValidation:rule="!has(self.retention) || !has(self.retention.maxAge) || !has(self.topic.config) || !('retention.ms' in self.topic.config)",message="set the DLQ's age limit in retention.maxAge or in topic.config[\"retention.ms\"], not both"
type DeadLetterQueueSpec struct {
	// topic is the Kafka topic that holds the dead letters.
	// +required
	Topic DeadLetterTopic `json:"topic"`

	// retention bounds how long and how many dead letters are kept. Absent means the broker's defaults
	// and no count limit.
	// +optional
	Retention *DeadLetterRetention `json:"retention,omitempty"`

	// alerts are the thresholds of the alert rules and of the Healthy condition. Absent fields take the
	// defaults documented on each.
	// +optional
	Alerts *DeadLetterAlerts `json:"alerts,omitempty"`

	// deletionPolicy says what happens to the topic when this resource is deleted: Retain (the default)
	// keeps it and its records, Delete deletes it.
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`

	// statusRefreshInterval is how often the live figures in status (messages, their times and
	// breakdown, Healthy) are refreshed. Defaults to the manager's --status-refresh-interval (30s).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	StatusRefreshInterval *metav1.Duration `json:"statusRefreshInterval,omitempty"`

	// kafka is the connection to the cluster that holds the topic. Absent or empty means the
	// operator-wide default.
	// +optional
	Kafka *KafkaConnection `json:"kafka,omitempty"`
}

// DeadLetterTopic is the Kafka topic of a dead letter queue.
type DeadLetterTopic struct {
	// name of the topic. Immutable: create a new DeadLetterQueue to move to another topic.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="topic.name is immutable; create a new DeadLetterQueue for another topic"
	// +required
	Name TopicName `json:"name"`

	// partitions of the topic. May only grow: Kafka cannot remove partitions. Defaults to 3.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +kubebuilder:validation:XValidation:rule="self >= oldSelf",message="topic.partitions may only grow: Kafka cannot remove partitions"
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// replicationFactor of the topic, set at creation. Absent means the broker's default.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="topic.replicationFactor is immutable once set"
	// +optional
	ReplicationFactor *int32 `json:"replicationFactor,omitempty"`

	// config holds extra topic configs ("compression.type": "zstd"), kept in place: a change made out
	// of band is set back.
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[a-z0-9]+([.-][a-z0-9]+)*$'))",message="topic.config keys must be Kafka topic config names such as \"compression.type\""
	// +optional
	Config map[string]string `json:"config,omitempty"`

	// existingTopic is what happens when the topic exists and the operator did not create it (for
	// this queue): Refuse (the default) leaves it unchanged, reads none of its records and reports
	// TopicReady False with reason TopicNotOwned; Adopt manages it as if created here, which the
	// manager allows only for names its topic claim policy gives this namespace (--topic-prefix),
	// and never for a topic the operator manages for another resource (reason TopicConflict).
	// +kubebuilder:default=Refuse
	// +optional
	ExistingTopic ExistingTopic `json:"existingTopic,omitempty"`
}

// DeadLetterRetention bounds what a dead letter queue keeps.
type DeadLetterRetention struct {
	// maxAge is how long a dead letter is kept (the topic's retention.ms), such as 168h (7 days).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`

	// maxMessages is how many dead letters are kept; the oldest beyond it are deleted.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxMessages *int64 `json:"maxMessages,omitempty"`
}

// DeadLetterAlerts are the thresholds of a dead letter queue's alerts. maxMessages, maxGrowthPerMinute
// and maxOldestAge raise the warning and critical tiers; escalateMessages and escalateOldestAge raise
// the third tier (severity critical with the label escalation: engineering-lead), so each must be
// beyond the warning threshold it escalates.
// +kubebuilder:validation:XValidation:rule="!has(self.escalateMessages) || !has(self.maxMessages) || self.escalateMessages > self.maxMessages",message="alerts.escalateMessages must be more than alerts.maxMessages (500 by default): the engineering-lead tier escalates the warning"
// +kubebuilder:validation:XValidation:rule="!has(self.escalateOldestAge) || !has(self.maxOldestAge) || duration(self.escalateOldestAge) > duration(self.maxOldestAge)",message="alerts.escalateOldestAge must be longer than alerts.maxOldestAge (24h by default): the engineering-lead tier escalates the warning"
type DeadLetterAlerts struct {
	// maxMessages alerts when the queue holds more dead letters than this for maxMessagesFor.
	// Defaults to 500.
	// +kubebuilder:default=500
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxMessages *int64 `json:"maxMessages,omitempty"`

	// maxMessagesFor is how long maxMessages must be exceeded before the alert fires. Defaults to 1h.
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	MaxMessagesFor *metav1.Duration `json:"maxMessagesFor,omitempty"`

	// maxGrowthPerMinute alerts when more dead letters than this arrive per minute, sustained for
	// maxGrowthFor. Defaults to 12 (0.2 per second).
	// +kubebuilder:default=12
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxGrowthPerMinute *int32 `json:"maxGrowthPerMinute,omitempty"`

	// maxGrowthFor is how long the growth must last before the alert fires. Defaults to 10m.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	MaxGrowthFor *metav1.Duration `json:"maxGrowthFor,omitempty"`

	// maxOldestAge alerts when the oldest dead letter is older than this: nobody is looking at the
	// queue. Defaults to 24h.
	// +kubebuilder:default="24h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	MaxOldestAge *metav1.Duration `json:"maxOldestAge,omitempty"`

	// escalateMessages escalates to the engineering lead when the queue holds more dead letters than
	// this for maxMessagesFor. Must be more than maxMessages. Defaults to 1000, or to twice
	// maxMessages when maxMessages is 1000 or more (no API default, so that a queue whose maxMessages
	// is already 1000 or more stays valid).
	// +kubebuilder:validation:Minimum=2
	// +optional
	EscalateMessages *int64 `json:"escalateMessages,omitempty"`

	// escalateOldestAge escalates to the engineering lead when the oldest pending dead letter is
	// older than this, such as 168h (7 days; durations have no day unit). Must be longer than
	// maxOldestAge. Defaults to 168h, or to twice maxOldestAge when maxOldestAge is 168h or more.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	EscalateOldestAge *metav1.Duration `json:"escalateOldestAge,omitempty"`
}

// DeadLetterQueueStatus is the live state of a dead letter queue.
type DeadLetterQueueStatus struct {
	// conditions are Ready (the topic exists as specified), Healthy (False, with reason TooManyMessages,
	// FastGrowth or OldMessages, while a threshold of spec.alerts is crossed at the last refresh; the
	// alert rules on the same thresholds fire once the crossing has lasted their `for` duration;
	// Unknown, with reason FiguresStale, while the figures were last read more than two refresh
	// intervals ago, Kafka being unreachable, say).
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// topic is the topic the operator manages for this queue.
	// +kubebuilder:validation:MaxLength=249
	// +optional
	Topic string `json:"topic,omitempty"`

	// kafkaClusterID is the cluster ID Kafka's Metadata last reported for this resource's
	// connection; the operator tells clusters apart by it, and goes by it while the brokers cannot
	// be asked. Unset until the connection first reaches Kafka.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	KafkaClusterID string `json:"kafkaClusterID,omitempty"`

	// partitions is the topic's partition count in Kafka.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// messages is the number of dead letters held (end minus start offsets over all partitions), the
	// figure the alert rules use.
	// +optional
	Messages *int64 `json:"messages,omitempty"`

	// oldestMessageTime is the timestamp of the oldest dead letter held (its Kafka record timestamp,
	// to the second).
	// +optional
	OldestMessageTime *metav1.Time `json:"oldestMessageTime,omitempty"`

	// newestMessageTime is the timestamp of the newest dead letter held (its Kafka record timestamp,
	// to the second).
	// +optional
	NewestMessageTime *metav1.Time `json:"newestMessageTime,omitempty"`

	// reasons counts the dead letters held by reason (non_retriable_error, max_retries_exceeded,
	// deadline_exceeded, undeliverable, malformed), the largest first, at most 20. Like errorTypes and pipelines
	// it is read from the records' context headers ("unknown" for a record without the header), and
	// kept up to date incrementally: a refresh reads only the dead letters new since the last one, and
	// those trimmed or expired leave the counts.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Reasons []NamedCount `json:"reasons,omitempty"`

	// errorTypes counts the dead letters held by error type, the largest first, at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	ErrorTypes []NamedCount `json:"errorTypes,omitempty"`

	// pipelines counts the dead letters held by source pipeline ("<namespace>/<name>"), the largest
	// first, at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +listType=atomic
	// +optional
	Pipelines []NamedCount `json:"pipelines,omitempty"`

	// stateTopic is the record of decisions: a compacted topic beside the queue's topic
	// (<topic>.state), created and owned with it, holding the latest state of every dead letter a
	// DeadLetterAction acted on (absent means Pending). Every surface reads states from it.
	// +kubebuilder:validation:MaxLength=249
	// +optional
	StateTopic string `json:"stateTopic,omitempty"`

	// pending is the number of dead letters held that no action has decided on yet (messages minus
	// those Replayed, Resolved or Ignored).
	// +optional
	Pending *int64 `json:"pending,omitempty"`

	// states counts the dead letters held by state (Pending, Replayed, Resolved, Ignored).
	// +kubebuilder:validation:MaxItems=4
	// +listType=atomic
	// +optional
	States []NamedCount `json:"states,omitempty"`

	// oldestPendingTime is the timestamp of the oldest pending dead letter held (its Kafka record
	// timestamp, to the second): the age the oldest-dead-letter alert watches.
	// +optional
	OldestPendingTime *metav1.Time `json:"oldestPendingTime,omitempty"`

	// lastRefreshTime is when the figures shown were read from Kafka. It moves only when a figure
	// changed: a refresh that finds nothing new leaves status as it is, so it is the time of the last
	// change seen, not of the last look (which is at most statusRefreshInterval ago while Ready).
	// +optional
	LastRefreshTime *metav1.Time `json:"lastRefreshTime,omitempty"`
}

// DeadLetterQueue declares a Kafka dead letter topic with its retention and alert thresholds. Its
// status shows the live number of dead letters, their age and a breakdown by reason.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=dlq,categories=retryops
// +kubebuilder:printcolumn:name="Topic",type=string,JSONPath=`.spec.topic.name`
// +kubebuilder:printcolumn:name="Messages",type=integer,JSONPath=`.status.messages`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Oldest",type=date,JSONPath=`.status.oldestMessageTime`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Healthy",type=string,JSONPath=`.status.conditions[?(@.type=="Healthy")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type DeadLetterQueue struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired dead letter queue.
	// +required
	Spec DeadLetterQueueSpec `json:"spec"`

	// status is the live state of the queue.
	// +optional
	Status DeadLetterQueueStatus `json:"status,omitempty"`
}

// DeadLetterQueueList is a list of DeadLetterQueue.
// +kubebuilder:object:root=true
type DeadLetterQueueList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the DeadLetterQueues.
	Items []DeadLetterQueue `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &DeadLetterQueue{}, &DeadLetterQueueList{})
}
