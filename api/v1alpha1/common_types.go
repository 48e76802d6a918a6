package v1alpha1

// LocalObjectReference names an object of a known kind in the same namespace.
type LocalObjectReference struct {
	// name of the referenced object, in the same namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SecretKeyReference selects one key of a Secret in the same namespace as the resource.
type SecretKeyReference struct {
	// name of the Secret, in the same namespace as the resource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// key within the Secret's data. Each reference documents its default.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// SecretReference names a Secret in the same namespace as the resource; the keys it must hold are
// documented where it is used.
type SecretReference struct {
	// name of the Secret, in the same namespace as the resource.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// SASLMechanism is a SASL mechanism for authenticating to Kafka.
// +kubebuilder:validation:Enum=PLAIN;SCRAM-SHA-256;SCRAM-SHA-512
type SASLMechanism string

// The SASL mechanisms the operator and the dispatcher support.
const (
	SASLPlain       SASLMechanism = "PLAIN"
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// PlaintextPassword says whether SASL PLAIN may send its password over a connection without TLS.
// +kubebuilder:validation:Enum=Refuse;Allow
type PlaintextPassword string

// The plaintextPassword values.
const (
	// PlaintextPasswordRefuse refuses SASL PLAIN without TLS (the default).
	PlaintextPasswordRefuse PlaintextPassword = "Refuse"
	// PlaintextPasswordAllow allows SASL PLAIN without TLS: the password crosses the network in clear
	// text. For a local or test cluster only.
	PlaintextPasswordAllow PlaintextPassword = "Allow"
)

// KafkaConnection says how to reach a Kafka cluster. An empty or absent connection uses the
// operator-wide default given to the manager (flags --kafka-bootstrap-servers and friends) whole: its
// servers, TLS and SASL. tls and sasl apply only together with bootstrapServers, so that the default
// credentials are never sent under a resource's own TLS settings, nor a resource's credentials to the
// default cluster. SASL PLAIN needs tls unless sasl.plaintextPassword is Allow. Secrets are read by
// the operator and mounted into consumer pods; they are never copied into status, events, logs or
// ConfigMaps.
// +kubebuilder:validation:XValidation:rule="(has(self.bootstrapServers) && size(self.bootstrapServers) > 0) || (!has(self.tls) && !has(self.sasl))",message="kafka.tls and kafka.sasl apply only with kafka.bootstrapServers: without bootstrapServers the operator's default connection (its servers, TLS and SASL) is used whole"
// +kubebuilder:validation:XValidation:rule="!has(self.sasl) || self.sasl.mechanism != 'PLAIN' || has(self.tls) || (has(self.sasl.plaintextPassword) && self.sasl.plaintextPassword == 'Allow')",message="kafka.sasl.mechanism PLAIN without kafka.tls sends the password in clear text: set kafka.tls, use SCRAM-SHA-256 or SCRAM-SHA-512, or set kafka.sasl.plaintextPassword: Allow"
type KafkaConnection struct {
	// bootstrapServers lists host:port pairs of Kafka brokers used to discover the cluster. Absent means
	// the operator-wide default connection, whole (then tls and sasl must be absent too). The manager
	// may restrict them (--kafka-allowed-bootstrap-servers) or require them
	// (--require-resource-credentials).
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9]([A-Za-z0-9.\-]*[A-Za-z0-9])?(:[0-9]{1,5})$|^\[[0-9A-Fa-f:.]+\]:[0-9]{1,5}$`
	// +kubebuilder:validation:items:MaxLength=261
	// +listType=atomic
	// +optional
	BootstrapServers []string `json:"bootstrapServers,omitempty"`

	// tls enables TLS to the brokers; only with bootstrapServers. Absent means plaintext.
	// +optional
	TLS *KafkaTLS `json:"tls,omitempty"`

	// sasl enables SASL authentication; only with bootstrapServers. Absent means none.
	// +optional
	SASL *KafkaSASL `json:"sasl,omitempty"`
}

// KafkaTLS configures TLS to the brokers.
type KafkaTLS struct {
	// caSecretRef selects the PEM CA bundle that signs the brokers' certificates. The key defaults to
	// "ca.crt". Absent means the system roots.
	// +optional
	CASecretRef *SecretKeyReference `json:"caSecretRef,omitempty"`

	// clientCertSecretRef names a Secret of type kubernetes.io/tls (keys "tls.crt" and "tls.key") holding
	// a client certificate for mutual TLS.
	// +optional
	ClientCertSecretRef *SecretReference `json:"clientCertSecretRef,omitempty"`

	// serverName overrides the name checked in the brokers' certificates.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ServerName string `json:"serverName,omitempty"`
}

// KafkaSASL configures SASL authentication.
type KafkaSASL struct {
	// mechanism is the SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	// +required
	Mechanism SASLMechanism `json:"mechanism"`

	// secretRef names a Secret holding the keys "username" and "password". A change to the Secret is
	// picked up without restarting anything.
	// +required
	SecretRef SecretReference `json:"secretRef"`

	// plaintextPassword says whether mechanism PLAIN may be used without tls, which sends the password
	// over the network in clear text: Refuse (the default) refuses such a connection, Allow permits it
	// (for a local or test cluster only). The SCRAM mechanisms never send the password and ignore it.
	// +kubebuilder:default=Refuse
	// +optional
	PlaintextPassword PlaintextPassword `json:"plaintextPassword,omitempty"`
}

// NamedCount is a count of messages under one name (a reason, an error type, a pipeline).
type NamedCount struct {
	// name the count is kept under.
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`

	// count of messages.
	// +kubebuilder:validation:Minimum=0
	// +required
	Count int64 `json:"count"`
}

// DeletionPolicy says what happens to Kafka topics when the resource that owns them is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

// The deletion policies.
const (
	// DeletionPolicyRetain leaves the topic and its records in Kafka.
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyDelete deletes the topic from Kafka.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// ExistingTopic says what the operator does with a topic of the requested name that exists and that
// it did not create: Refuse (the default) leaves it alone and reports it; Adopt manages it as if the
// operator had created it (its configs, partitions, trimming and, under deletionPolicy Delete, its
// deletion), when the manager's topic claim policy allows the namespace that name.
// +kubebuilder:validation:Enum=Refuse;Adopt
type ExistingTopic string

// The ways of treating an existing topic.
const (
	// ExistingTopicRefuse leaves a topic the operator did not create unchanged and reports it.
	ExistingTopicRefuse ExistingTopic = "Refuse"
	// ExistingTopicAdopt manages an existing topic as if the operator had created it.
	ExistingTopicAdopt ExistingTopic = "Adopt"
)

// TopicName is the name of a Kafka topic: 1 to 249 characters of letters, digits, '.', '_' and '-',
// and neither "." nor "..".
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=249
// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]+$`
// +kubebuilder:validation:XValidation:rule="self != '.' && self != '..'",message="a topic name cannot be '.' or '..'"
type TopicName string
