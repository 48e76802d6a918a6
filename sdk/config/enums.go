package config

// SASLMechanism is a SASL mechanism for authenticating to Kafka.
type SASLMechanism string

// The SASL mechanisms.
const (
	// SASLPlain is SASL/PLAIN: the password travels as is (use it only with TLS).
	SASLPlain SASLMechanism = "PLAIN"
	// SASLScramSHA256 is SCRAM with SHA-256.
	SASLScramSHA256 SASLMechanism = "SCRAM-SHA-256"
	// SASLScramSHA512 is SCRAM with SHA-512.
	SASLScramSHA512 SASLMechanism = "SCRAM-SHA-512"
)

// RetryTopicNaming says how retry-tier topics are named and shared.
type RetryTopicNaming string

// The retry-tier namings.
const (
	// NamingByAttempt names a tier after its attempt: <source>.retry.<n>.
	NamingByAttempt RetryTopicNaming = "ByAttempt"
	// NamingByDelay names a tier after its delay (<source>.retry.<delay>), so that attempts with the
	// same delay share a topic.
	NamingByDelay RetryTopicNaming = "ByDelay"
)

// DeliveryOrdering says whether records of one partition are delivered in order.
type DeliveryOrdering string

// The orderings.
const (
	// OrderingOrdered delivers a partition's records one at a time (or one batch at a time), in
	// offset order; a failed record moves to a retry tier and the next one goes on.
	OrderingOrdered DeliveryOrdering = "Ordered"
	// OrderingUnordered delivers a partition's records concurrently, up to maxInFlight.
	OrderingUnordered DeliveryOrdering = "Unordered"
)
