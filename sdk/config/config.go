// Package config is the dispatcher's configuration: the contract between the operator, which renders
// it for each ConsumerPipeline, and the data plane (the dispatcher binary and the library mode in
// sdk/retryloop), which runs it.
//
// The operator renders a [Config] as JSON into a ConfigMap, mounts it into the consumer pod, and
// points the environment variable RETRYOPS_CONFIG ([EnvConfig]) at the file. Secrets are never part
// of the file: TLS keys and SASL credentials are files of mounted Secrets, named by path. A small set
// of environment variables in the seeds' naming (see the Env constants) can set or override the most
// common fields, so that a consumer configured the way the seed services were keeps working; an
// environment variable that is set wins over the file.
//
// [Load] reads the file and the environment, fills defaults ([Config.Default]) and validates
// ([Config.Validate]). Every field below is part of the API: renaming one breaks deployed pipelines.
// The file is versioned ([Version], the field version): a new optional field is a new minor version,
// which a reader of an older minor refuses only when the file uses it. The operator's tests hold the
// two sides to it: this package reads every config the operator renders
// (internal/render/contract_test.go), and the policy it carries ([Config.Policy], sdk/policy's Spec)
// has the JSON shape of the RetryPolicy resource's spec, field for field
// (internal/policy/convert_test.go).
package config

import (
	"time"

	"github.com/retryops/retry-operator/sdk/policy"
)

// Config is the whole configuration of one pipeline's consumer.
type Config struct {
	// version is the version of the file's format, "major.minor" (Version is the one this module
	// writes and reads; the operator writes it). Absent means 1.0 (a Config built in Go, or a file
	// written by hand without it). A reader refuses another major. It reads a newer minor whose fields it all knows (a
	// newer writer that used none of its new fields), and refuses one with fields it does not know,
	// naming them, rather than run without a setting the writer meant; at its own minor or an older
	// one, an unknown field is a misspelt one, and refused too.
	// +optional
	Version string `json:"version,omitempty"`

	// pipeline identifies the ConsumerPipeline this consumer serves. It labels metrics and is written
	// into dead letters (retryops.pipeline = "<namespace>/<name>"). Optional: without it the
	// consumer group stands in for the name.
	// +optional
	Pipeline Pipeline `json:"pipeline"`

	// consumerGroup is the Kafka consumer group that consumes the source topic and the retry tiers.
	// Defaults to "<pipeline.namespace>.<pipeline.name>" (the ConsumerPipeline's default) when both
	// are set; otherwise required. Env: KAFKA_CONSUMER_GROUP.
	// +required
	ConsumerGroup string `json:"consumerGroup"`

	// group tunes consumer-group membership. Absent fields take franz-go's defaults.
	// +optional
	Group GroupSettings `json:"group"`

	// kafka is the connection to the cluster holding the source topic and the retry tiers.
	// +required
	Kafka Kafka `json:"kafka"`

	// deadLetterKafka is the connection to the cluster holding the dead letter topic, when it differs
	// from kafka (a DeadLetterQueue with its own connection). Absent means kafka.
	// +optional
	DeadLetterKafka *Kafka `json:"deadLetterKafka,omitempty"`

	// topics are the source topic, the retry tiers and the dead letter topic.
	// +required
	Topics Topics `json:"topics"`

	// policy is the RetryPolicy spec, exactly as in the RetryPolicy resource. Absent means
	// DefaultPolicy (3 attempts, 1s then 2s, the design's standard classification). Env:
	// RETRY_MAX_ATTEMPTS, RETRY_BASE_DELAY_SECONDS, RETRY_MAX_DELAY_SECONDS override fields of it.
	// +optional
	Policy *policy.Spec `json:"policy,omitempty"`

	// sink is the HTTP endpoint the dispatcher delivers each record to. Required by the dispatcher
	// binary; ignored by the library mode, where the user's handler is the sink. Env: SINK_URL.
	// +optional
	Sink *Sink `json:"sink,omitempty"`

	// delivery bounds concurrency and says whether order is kept.
	// +optional
	Delivery Delivery `json:"delivery"`

	// maxRecordBytes is the largest record (key + value + headers, each header counting 17 bytes
	// more than its name and value, as in the HTTP request; not counting the dispatcher's own
	// retryops.* headers, which are not delivered) delivered to the sink; a larger one is
	// dead-lettered at once with reason undeliverable. Defaults to 1 MiB
	// (DefaultMaxRecordBytes). A failed record is written to a retry tier with about 1 KiB of
	// headers more: with Kafka's default max.message.bytes (about 1 MB) a record within a few KiB of
	// 1 MiB may not fit, and is then dead-lettered (undeliverable, error type RetryProduceFailed;
	// without its value if the dead letter topic rejects it too). A value above the default makes
	// the dispatcher produce batches that large: raise the topics' max.message.bytes to match.
	// +optional
	MaxRecordBytes int64 `json:"maxRecordBytes,omitempty"`

	// commitInterval is the least time between two offset commits: finished records are committed
	// together. When finished records waiting for their commit reach half of
	// delivery.maxUncommittedRecords they are committed at once, so the interval never throttles
	// deliveries. 0 commits as soon as anything finished. Defaults to 10ms (DefaultCommitInterval).
	// +optional
	CommitInterval *policy.Duration `json:"commitInterval,omitempty"`

	// drainTimeout bounds a graceful stop (SIGTERM) and a partition revocation: deliveries still
	// under way after it are abandoned and not committed, so they are delivered again by the next
	// owner. Keep it below the pod's terminationGracePeriodSeconds and the group's rebalance
	// timeout. Defaults to 25s.
	// +optional
	DrainTimeout *policy.Duration `json:"drainTimeout,omitempty"`

	// listen holds the addresses of the metrics and health endpoints.
	// +optional
	Listen Listen `json:"listen"`

	// circuitReport, when set, makes the consumer report its circuit breaker's state and Kafka
	// refusing it to the operator through a ConfigMap (see sdk/circuitstate).
	// +optional
	CircuitReport *CircuitReport `json:"circuitReport,omitempty"`
}

// CircuitReport names where a consumer reports its circuit breaker's state: a ConfigMap in
// pipeline.namespace holding one entry per pod (keyed by the pod's name, from POD_NAME) while that
// pod's breaker is not Closed. The operator reads it into the ConsumerPipeline's status.circuit.
type CircuitReport struct {
	// configMap is the name of the ConfigMap, in pipeline.namespace.
	ConfigMap string `json:"configMap"`
	// interval is how often a pod whose breaker is not Closed repeats its report, so that the
	// operator can tell a live report from one a vanished pod left. Defaults to 30s.
	// +optional
	Interval *policy.Duration `json:"interval,omitempty"`
}

// Pipeline identifies a ConsumerPipeline.
type Pipeline struct {
	// namespace of the ConsumerPipeline.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the ConsumerPipeline.
	// +optional
	Name string `json:"name,omitempty"`
}

// GroupSettings tunes consumer-group membership.
type GroupSettings struct {
	// sessionTimeout is how long the coordinator waits without a heartbeat before evicting a member.
	// Defaults to franz-go's 45s.
	// +optional
	SessionTimeout *policy.Duration `json:"sessionTimeout,omitempty"`
	// heartbeatInterval is how often the member heartbeats. Defaults to franz-go's 3s.
	// +optional
	HeartbeatInterval *policy.Duration `json:"heartbeatInterval,omitempty"`
	// rebalanceTimeout is how long a rebalance may take; it must exceed drainTimeout. Defaults to
	// franz-go's 60s.
	// +optional
	RebalanceTimeout *policy.Duration `json:"rebalanceTimeout,omitempty"`
	// instanceID enables static membership (KIP-345): a restarted member with the same id gets its
	// partitions back without a rebalance. Use a stable per-pod name (a StatefulSet ordinal), never
	// a Deployment pod name shared by two live pods.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`
}

// Kafka is how to reach and authenticate to one Kafka cluster. Secrets are files of mounted Secrets,
// re-read at every connection, so a rotated Secret is picked up without a restart.
type Kafka struct {
	// bootstrapServers are "host:port" seed brokers. Env: KAFKA_BOOTSTRAP_SERVERS (comma-separated;
	// applies to kafka only, not deadLetterKafka).
	// +required
	BootstrapServers []string `json:"bootstrapServers"`
	// clientID is sent with every request. Defaults to "retryops-dispatcher".
	// +optional
	ClientID string `json:"clientID,omitempty"`
	// tls enables TLS. Absent means plaintext.
	// +optional
	TLS *TLS `json:"tls,omitempty"`
	// sasl enables SASL authentication. Absent means none.
	// +optional
	SASL *SASL `json:"sasl,omitempty"`
}

// TLS configures TLS to the brokers. All fields are paths of files of a mounted Secret.
type TLS struct {
	// caFile is a PEM CA bundle that signs the brokers' certificates (the Secret key "ca.crt").
	// Absent means the system roots.
	// +optional
	CAFile string `json:"caFile,omitempty"`
	// certFile is a PEM client certificate for mutual TLS ("tls.crt"); set with keyFile.
	// +optional
	CertFile string `json:"certFile,omitempty"`
	// keyFile is the PEM private key of certFile ("tls.key").
	// +optional
	KeyFile string `json:"keyFile,omitempty"`
	// serverName overrides the name verified in the brokers' certificates.
	// +optional
	ServerName string `json:"serverName,omitempty"`
}

// SASL configures SASL authentication; the credentials are files of a mounted Secret with the keys
// "username" and "password".
type SASL struct {
	// mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	// +required
	Mechanism SASLMechanism `json:"mechanism"`
	// usernameFile is the path of the file holding the user name; set it or username.
	// +optional
	UsernameFile string `json:"usernameFile,omitempty"`
	// username is the user name itself, when the credentials' Secret has no key for it (a Strimzi
	// KafkaUser's Secret: the user is its name); set it or usernameFile. Not a secret.
	// +optional
	Username string `json:"username,omitempty"`
	// passwordFile is the path of the file holding the password.
	// +required
	PasswordFile string `json:"passwordFile"`
}

// Topics are the topics of a pipeline.
type Topics struct {
	// source is the topic consumed. Env: KAFKA_TOPIC_PRIMARY.
	// +required
	Source string `json:"source"`
	// retries are the retry tiers, in order (see RetryTier and Tiers.For). Required when the policy
	// allows retries (maxAttempts > 1). Absent means BuildTiers(source, ByAttempt, plan). Env:
	// KAFKA_TOPIC_RETRY (comma-separated names; tier i holds the records waiting for delivery
	// attempt i+1, the last tier also every later attempt).
	// +optional
	Retries Tiers `json:"retries,omitempty"`
	// draining are retry tiers of an earlier policy (or naming) that still hold records the
	// consumer group has not consumed: the dispatcher consumes them too, delivers each record at its
	// due time (at most MaxDrainingDelay ahead) and then follows the current policy (a record that
	// already had the current maxAttempts deliveries is dead-lettered as max_retries_exceeded). The
	// operator lists a tier here until the group's committed offsets reach its end, and only then
	// drops it (and, under retryTopics.deletionPolicy Delete, deletes it). At most MaxDrainingTiers.
	// +optional
	Draining []string `json:"draining,omitempty"`
	// deadLetter is the dead letter topic. It lives on deadLetterKafka when that is set. Env:
	// KAFKA_TOPIC_DLQ.
	// +required
	DeadLetter string `json:"deadLetter"`
}

// RetryTier is one retry-tier topic: it holds records waiting for the deliveries listed in attempts.
// Records carry their own due time (header retryops.due), so the delays here describe the tier (the
// operator shows them in status) rather than drive it.
type RetryTier struct {
	// name of the topic.
	// +required
	Name string `json:"name"`
	// delay is the nominal delay of the tier's retries.
	// +optional
	Delay policy.Duration `json:"delay"`
	// earliest is the shortest delay jitter can produce for the tier's retries.
	// +optional
	Earliest policy.Duration `json:"earliest"`
	// latest is the longest delay jitter can produce for the tier's retries.
	// +optional
	Latest policy.Duration `json:"latest"`
	// attempts are the delivery attempts (2 for the first retry) whose wait this tier holds,
	// ascending.
	// +required
	Attempts []int32 `json:"attempts"`
}

// Sink is the HTTP endpoint records are POSTed to.
type Sink struct {
	// url is the absolute http:// or https:// URL that receives each record as a POST. Env: SINK_URL.
	// +required
	URL string `json:"url"`
}

// Delivery bounds how records are handed to the sink.
type Delivery struct {
	// ordering is Ordered (the records of each partition one at a time, in offset order; the
	// default) or Unordered (up to maxInFlight at once, committed only up to the lowest unfinished
	// offset of each partition).
	// +optional
	Ordering DeliveryOrdering `json:"ordering,omitempty"`
	// maxInFlight bounds the deliveries under way at once (a delivery includes its retry or
	// dead-letter write), over all partitions. Defaults to 100.
	// +optional
	MaxInFlight int32 `json:"maxInFlight,omitempty"`
	// maxBufferedRecords bounds the records fetched and waiting for delivery in partitions that are
	// not paused (retry tiers waiting for their head record's due time are paused and do not
	// count): while they hold this many, the consumer stops polling, so fetching stops once the
	// client's buffer is full. Defaults to max(1000, 4*maxInFlight).
	// +optional
	MaxBufferedRecords int32 `json:"maxBufferedRecords,omitempty"`
	// maxUncommittedRecords bounds the records finished but not yet committed (offsets are
	// committed only up to the lowest unfinished record of each partition): when that many wait,
	// no new delivery starts until a commit. So a crash redelivers at most maxInFlight +
	// maxUncommittedRecords records, and in Unordered mode a stuck record holds back at most that
	// many behind it. Absent (0) means max(1000, 4*maxInFlight) (UncommittedLimit).
	// +optional
	MaxUncommittedRecords int32 `json:"maxUncommittedRecords,omitempty"`
	// batch, when set, delivers records in batches (sdk/batch's retryops.dev/batch/v1 document, a
	// result per record). Absent: one request per record.
	// +optional
	Batch *Batch `json:"batch,omitempty"`
}

// Batch bounds the batches of a pipeline that delivers in batches.
type Batch struct {
	// maxRecords is the most records in one batch (1-1000). Defaults to 100.
	// +optional
	MaxRecords int32 `json:"maxRecords,omitempty"`
	// maxBytes bounds a batch request's body as the HTTP sink sends it (its BatchSizer), or the
	// keys, values and headers of a batch's records for a batch handler that does not size its
	// requests (library mode); a single record larger than it goes alone. Defaults to 1 MiB; at
	// most 16 MiB.
	// +optional
	MaxBytes int64 `json:"maxBytes,omitempty"`
	// maxWait is the longest a record waits for its batch to fill. Defaults to 50ms; at most 10s.
	// +optional
	MaxWait *policy.Duration `json:"maxWait,omitempty"`
}

// Defaults and bounds of delivery.batch.
const (
	DefaultBatchMaxRecords = 100
	DefaultBatchMaxBytes   = 1 << 20
	DefaultBatchMaxWait    = 50 * time.Millisecond
	MaxBatchRecords        = 1000
	MaxBatchBytes          = 16 << 20
	MaxBatchWait           = 10 * time.Second
)

// UncommittedLimit is maxUncommittedRecords with its default applied.
func (d Delivery) UncommittedLimit() int32 {
	if d.MaxUncommittedRecords > 0 {
		return d.MaxUncommittedRecords
	}
	return max(1000, 4*d.MaxInFlight)
}

// Listen holds the addresses the consumer serves on. "-" disables an endpoint; the same address for
// both serves them together.
type Listen struct {
	// metricsAddress serves GET /metrics (Prometheus). Defaults to ":9090".
	// +optional
	MetricsAddress string `json:"metricsAddress,omitempty"`
	// healthAddress serves GET /healthz (liveness) and GET /readyz (readiness). Defaults to ":8081".
	// +optional
	HealthAddress string `json:"healthAddress,omitempty"`
}

// Defaults.
const (
	// DefaultMaxInFlight is delivery.maxInFlight's default (the API's default too).
	DefaultMaxInFlight = 100
	// DefaultMaxRecordBytes is maxRecordBytes's default: 1 MiB, about Kafka's default message size.
	DefaultMaxRecordBytes = 1 << 20
	// DefaultCommitInterval is commitInterval's default.
	DefaultCommitInterval = 10 * time.Millisecond
	// DefaultDrainTimeout is drainTimeout's default.
	DefaultDrainTimeout = 25 * time.Second
	// DefaultMetricsAddress is listen.metricsAddress's default.
	DefaultMetricsAddress = ":9090"
	// DefaultHealthAddress is listen.healthAddress's default.
	DefaultHealthAddress = ":8081"
	// DefaultClientID is kafka.clientID's default.
	DefaultClientID = "retryops-dispatcher"
	// Disabled as a listen address disables the endpoint.
	Disabled = "-"
	// DefaultCircuitReportInterval is circuitReport.interval's default.
	DefaultCircuitReportInterval = 30 * time.Second
)

// PipelineLabel is the value of the metrics' pipeline label: the pipeline's name, or the consumer
// group when the name is absent. The namespace is not part of it: Prometheus adds the pod's
// namespace as the target label "namespace".
func (c *Config) PipelineLabel() string {
	if c.Pipeline.Name != "" {
		return c.Pipeline.Name
	}
	return c.ConsumerGroup
}

// PipelineID is the value of the retryops.pipeline dead-letter header: "<namespace>/<name>", or
// just the name (or the consumer group) when the namespace (or name) is absent.
func (c *Config) PipelineID() string {
	switch {
	case c.Pipeline.Name == "":
		return c.ConsumerGroup
	case c.Pipeline.Namespace == "":
		return c.Pipeline.Name
	default:
		return c.Pipeline.Namespace + "/" + c.Pipeline.Name
	}
}

// Dur returns d's duration, or def when d is nil.
func Dur(d *policy.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// DeadLetterConnection returns the connection of the dead letter topic: deadLetterKafka, or kafka.
func (c *Config) DeadLetterConnection() *Kafka {
	if c.DeadLetterKafka != nil {
		return c.DeadLetterKafka
	}
	return &c.Kafka
}
