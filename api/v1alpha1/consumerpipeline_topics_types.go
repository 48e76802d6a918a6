package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// RetryTopicStatus is one retry tier.
type RetryTopicStatus struct {
	// name of the tier's topic.
	// +kubebuilder:validation:MaxLength=249
	// +required
	Name string `json:"name"`

	// delay is the nominal delay records wait in this tier.
	// +required
	Delay metav1.Duration `json:"delay"`

	// partitions of the topic.
	// +optional
	Partitions int32 `json:"partitions,omitempty"`

	// backlog is the number of records waiting in this tier.
	// +optional
	Backlog int64 `json:"backlog,omitempty"`
}

// PipelineTopics are the topics of a pipeline.
type PipelineTopics struct {
	// source is the consumed topic.
	// +kubebuilder:validation:MaxLength=249
	// +optional
	Source string `json:"source,omitempty"`

	// sourcePartitions is the source topic's partition count.
	// +optional
	SourcePartitions int32 `json:"sourcePartitions,omitempty"`

	// retries are the retry tiers, in order.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Retries []RetryTopicStatus `json:"retries,omitempty"`

	// unusedRetries are retry tiers the pipeline made earlier and no longer needs (after a policy or
	// naming change), kept because of the Retain deletion policy or, under Delete, until they are
	// drained (see drainingRetries).
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MaxLength=249
	// +listType=atomic
	// +optional
	UnusedRetries []string `json:"unusedRetries,omitempty"`

	// drainingRetries are the unused retry tiers that still hold records the consumer group has not
	// consumed, sorted. The dispatchers consume them too (topics.draining of their config) and deliver
	// their records, until the group's committed offsets reach their end; then a tier leaves this
	// list and is deleted (retryTopics.deletionPolicy Delete) or kept (Retain). At most 32 tiers
	// drain at once: the TopicsReady condition names any others, whose records wait unconsumed until
	// the list shrinks.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=249
	// +listType=atomic
	// +optional
	DrainingRetries []string `json:"drainingRetries,omitempty"`

	// deadLetter is the dead letter topic.
	// +kubebuilder:validation:MaxLength=249
	// +optional
	DeadLetter string `json:"deadLetter,omitempty"`
}
