package controllers

import "time"

// topicFinalizer guards the Kafka topics of DeadLetterQueues and ConsumerPipelines: it is added
// before the first Kafka side effect and removed once the deletion policy has been carried out, or
// once the deletion bound has passed with Kafka unreachable.
const topicFinalizer = "retry.retryops.dev/topic"

// Annotations the operator writes on the DeadLetterQueues and ConsumerPipelines it reconciles (status
// is rebuilt from the world and never read back as a record of what the operator did).
const (
	// annotationDeletionFailure is the error of the last failed attempt to delete a deleting
	// resource's topics. Once the deletion bound has passed it means an attempt was made and failed:
	// no new one is made, and the finalizer goes with a Warning event quoting it.
	annotationDeletionFailure = "retry.retryops.dev/deletion-failure"
)

// Field indexes.
const (
	// indexDLQByClaim indexes DeadLetterQueues by topic name, cluster-wide: topics are cluster-wide
	// in Kafka, so queues in different namespaces can claim the same one. The claim indexes hold the
	// name alone, on any Kafka cluster: the checks keep the resources on their own (claims_cluster.go).
	indexDLQByClaim = ".spec.topic.claim"
	// indexPipelineBySourceClaim indexes ConsumerPipelines by source topic, cluster-wide: the
	// pipelines on one source, one of which manages it when several ask to create it.
	indexPipelineBySourceClaim = ".spec.source.claim"
	// indexPipelineByGroupClaim indexes ConsumerPipelines by consumer group, cluster-wide: two
	// pipelines in one group would split its partitions.
	indexPipelineByGroupClaim = ".spec.source.consumerGroup.claim"
	// indexPipelineByTierClaim indexes ConsumerPipelines by tier base, cluster-wide: two pipelines
	// with one base would share their retry tiers.
	indexPipelineByTierClaim = ".retryTiers.claim"
	// indexPipelineByPolicy and indexPipelineByDLQ index ConsumerPipelines by the objects they
	// reference, so that a policy or a dead letter queue finds its pipelines without listing every
	// pipeline of the namespace.
	indexPipelineByPolicy = ".spec.retryPolicyRef.name"
	indexPipelineByDLQ    = ".spec.deadLetterQueueRef.name"
)

// Event reasons of Kafka side effects (condition reasons are in api/v1alpha1).
const (
	eventTopicCreated   = "TopicCreated"
	eventTopicRecreated = "TopicRecreated"
	eventTopicCorrected = "TopicCorrected"
	eventTopicDeleted   = "TopicDeleted"
	eventTopicKept      = "TopicKept"
	eventTopicAdopted   = "TopicAdopted"
	eventTopicMayRemain = "TopicMayRemain"
	eventRecordsTrimmed = "RecordsTrimmed"
)

// maxConditionMessage bounds the error text copied into a condition or an event.
const maxConditionMessage = 1024

// maxBreakdownEntries bounds status.reasons, status.errorTypes and status.pipelines of a
// DeadLetterQueue (the API's MaxItems).
const maxBreakdownEntries = 20

// staleRetry is how soon a reconcile that read a stale object is retried.
const staleRetry = 200 * time.Millisecond

// deletionRetryStep is the longest wait between two attempts to delete a resource's topics.
const deletionRetryStep = 5 * time.Second
