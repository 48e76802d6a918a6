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
)
