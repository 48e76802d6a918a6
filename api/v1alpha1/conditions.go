package v1alpha1

// Condition types used on the resources of this API. Ready summarises the others.
const (
	// ConditionReady is True when the resource is fully reconciled and working.
	ConditionReady = "Ready"
	// ConditionTopicsReady is True when every Kafka topic the resource needs exists as specified.
	ConditionTopicsReady = "TopicsReady"
	// ConditionDeploymentReady is True when the consumer Deployment has all its replicas ready.
	ConditionDeploymentReady = "DeploymentReady"
	// ConditionAlertsReady is True when the alert rules are in place.
	ConditionAlertsReady = "AlertsReady"
	// ConditionHealthy is False when a DeadLetterQueue crosses one of its alert thresholds.
	ConditionHealthy = "Healthy"
	// ConditionCircuitClosed is False while a ConsumerPipeline's consumers report their circuit
	// breaker open or half-open (status.circuit).
	ConditionCircuitClosed = "CircuitClosed"
	// ConditionStalled (the kstatus convention) is True while the resource cannot make progress
	// without a change by a person: a spec error (reason InvalidSpec, or the reason of the error, such
	// as TopicClaimRefused), or, on a ConsumerPipeline, a Deployment whose rollout passed its progress
	// deadline (ProgressDeadlineExceeded). The message says what to change. It is absent otherwise, so
	// that kstatus (flux wait, cli-utils) computes Failed at once for a stalled resource and Current
	// for a Ready one, instead of waiting for a timeout.
	ConditionStalled = "Stalled"
)

// Condition reasons of the CircuitClosed condition of a ConsumerPipeline.
const (
	// ReasonCircuitClosed means no consumer reports an open or half-open circuit breaker.
	ReasonCircuitClosed = "CircuitClosed"
	// ReasonCircuitOpen means at least one consumer's circuit breaker is open: it has paused
	// consumption because too many deliveries failed, and probes the sink after openDuration.
	ReasonCircuitOpen = "CircuitOpen"
	// ReasonCircuitHalfOpen means at least one consumer's breaker is half-open (and none open): probe
	// deliveries are testing whether the sink recovered.
	ReasonCircuitHalfOpen = "CircuitHalfOpen"
	// ReasonNoCircuitBreaker means the RetryPolicy has no circuit breaker, so there is nothing to
	// open.
	ReasonNoCircuitBreaker = "NoCircuitBreaker"
)

// Condition reasons of the DeploymentReady condition of a ConsumerPipeline read from its Deployment.
const (
	// ReasonReplicaFailure means the Deployment controller could not create the consumers' pods (the
	// Deployment's ReplicaFailure condition: a Pod Security rejection, an exhausted quota, a missing
	// ServiceAccount); the message has its reason and message.
	ReasonReplicaFailure = "ReplicaFailure"
	// ReasonKafkaAuthenticationFailed means consumers report that Kafka refuses their credentials
	// (SASL) or that the TLS handshake fails; the message names the pods, since when, and the
	// broker's error. Consumers refused an operation by the ACLs report ReasonKafkaUnauthorized.
	ReasonKafkaAuthenticationFailed = "KafkaAuthenticationFailed"
)

// Condition reasons shared by the controllers.
const (
	// ReasonValid means the spec was accepted and acted on.
	ReasonValid = "Valid"
	// ReasonInvalidSpec means the spec has a problem the API server could not catch; the message says
	// which. The controller waits for a spec change.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonReconciling means work is under way.
	ReasonReconciling = "Reconciling"
	// ReasonKafkaUnavailable means the brokers could not be reached.
	ReasonKafkaUnavailable = "KafkaUnavailable"
	// ReasonKafkaUnauthorized means the brokers refused the credentials or the operation.
	ReasonKafkaUnauthorized = "KafkaUnauthorized"
	// ReasonReferenceNotFound means a referenced object does not exist.
	ReasonReferenceNotFound = "ReferenceNotFound"
	// ReasonKafkaCredentialsMissing means the pipeline is on the default Kafka connection, which
	// needs credentials (SASL or a TLS client certificate), and its namespace has no consumer Secret
	// (the manager's --kafka-consumer-secret) holding them: no Deployment is made until it does.
	ReasonKafkaCredentialsMissing = "KafkaCredentialsMissing"
)

// Condition reasons of the Kafka topic work of the DeadLetterQueue and ConsumerPipeline controllers.
const (
	// ReasonTopicReady means the DeadLetterQueue's topic exists as specified.
	ReasonTopicReady = "TopicReady"
	// ReasonTopicsReady means every topic of a ConsumerPipeline exists as specified.
	ReasonTopicsReady = "TopicsReady"
	// ReasonPartitionShrinkRefused means a topic has more partitions than the spec asks for. Kafka
	// cannot remove partitions, so the operator leaves the topic as it is; raise the spec to match.
	ReasonPartitionShrinkRefused = "PartitionShrinkRefused"
	// ReasonTopicConflict means another resource, created earlier, manages the same topic on the same
	// cluster (for a ConsumerPipeline: a retry tier of another pipeline); the message names it. The
	// resource reporting it leaves the topic alone until the other one goes away.
	ReasonTopicConflict = "TopicConflict"
	// ReasonConsumerGroupConflict means another ConsumerPipeline, created earlier, joins the same
	// consumer group on the same cluster; the message names it. The newer pipeline runs no consumers
	// until the other goes or it names another spec.source.consumerGroup.
	ReasonConsumerGroupConflict = "ConsumerGroupConflict"
	// ReasonTopicNotOwned means a topic the resource names exists and the operator did not create it
	// for this resource: it is left unchanged (no configs, partitions, trimming, reading of its records
	// or deletion). Set existingTopic: Adopt to manage it, or name another topic.
	ReasonTopicNotOwned = "TopicNotOwned"
	// ReasonTopicClaimRefused means the manager's topic claim policy (--topic-prefix) does not give
	// the resource's namespace the topic it would create, adopt, for a ConsumerPipeline's source,
	// read or, for a DeadLetterAction's Replay target.topic, write into (the action fails), or that
	// the topic is named like another queue's record of decisions (<queue topic>.state); the message
	// names the rule.
	ReasonTopicClaimRefused = "TopicClaimRefused"
	// ReasonConsumerGroupClaimRefused means the manager's consumer group claim policy
	// (--group-prefix, by default --topic-prefix) does not give the ConsumerPipeline's namespace the
	// group it would join; the message names the rule.
	ReasonConsumerGroupClaimRefused = "ConsumerGroupClaimRefused"
	// ReasonSourceTopicMissing means a ConsumerPipeline's source topic does not exist and
	// spec.source.create is absent; the pipeline waits for the topic to appear.
	ReasonSourceTopicMissing = "SourceTopicMissing"
	// ReasonKafkaRejected means the brokers refused a topic operation (an invalid config value, a
	// replication factor above the number of brokers, a policy violation); the message has the
	// broker's answer.
	ReasonKafkaRejected = "KafkaRejected"
	// ReasonDeleting means the resource is being deleted and the operator is removing its topics.
	ReasonDeleting = "Deleting"
	// ReasonReconcileError means a step of the reconcile failed with an error of no known kind (the
	// API server refused a read, say); the message has the error, and the operator retries with
	// backoff.
	ReasonReconcileError = "ReconcileError"
	// ReasonChildConflict means an object with the name of a child the operator makes exists and
	// the resource does not control it (another controller does, or nobody: made by hand, by
	// GitOps, by someone who predicted the name); the operator never adopts or overwrites it, names
	// it in the message and waits for it to be deleted or renamed.
	ReasonChildConflict = "ChildConflict"
)

// ReasonReplayTargetRefused (a DeadLetterAction's Ready and Complete, phase Failed) means a Replay's
// spec.target.topic is a topic the operator manages as a dead-letter queue, a record of decisions or
// a retry tier: the action fails before anything is written.
const ReasonReplayTargetRefused = "ReplayTargetRefused"

// Condition reasons of the Healthy condition of a DeadLetterQueue. Healthy reflects the thresholds of
// spec.alerts as crossed at the last refresh; the alert rules on the same thresholds add their `for`
// durations before firing.
const (
	// ReasonHealthy means no alert threshold of the queue is crossed.
	ReasonHealthy = "Healthy"
	// ReasonTooManyMessages means the queue holds more dead letters than spec.alerts.maxMessages.
	ReasonTooManyMessages = "TooManyMessages"
	// ReasonFastGrowth means the queue grows by more than spec.alerts.maxGrowthPerMinute dead letters
	// per minute (net growth, over the window of the DeadLetterQueueGrowth alert).
	ReasonFastGrowth = "FastGrowth"
	// ReasonOldMessages means the oldest dead letter held is older than spec.alerts.maxOldestAge.
	ReasonOldMessages = "OldMessages"
	// ReasonFiguresStale (Healthy Unknown) means the figures in status were last read more than two
	// refresh intervals ago (Kafka unreachable, say): whether a threshold is crossed is not known.
	ReasonFiguresStale = "FiguresStale"
)
