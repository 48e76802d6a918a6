// Package kafka is the operator's only view of Kafka, and carries no Kafka
// client library: a Connection (plain data resolved from Secrets by the
// controllers), the small Admin interface the controllers call to reconcile
// topics and read offsets and consumer-group commits, the Scanner that reads
// records, the ClientFactory that hands both out per Connection, a Registry
// that closes the clients of connections nobody uses any more, the
// batching of the topic work of every resource on one connection into one
// request per broker (Batching, BatchingFactory: see batch.go), and the
// planning of a topic against its spec (PlanTopic, ApplyPlan).
//
// The implementation, which speaks the real Kafka protocol through franz-go
// (kgo/kadm) so that it works unchanged against Apache Kafka, Strimzi,
// Redpanda or MSK, is in the franz subpackage; only the command that wires
// the operator imports it. The kafkafake subpackage provides an in-memory
// Admin for controller unit tests.
//
// Errors returned by Admin methods are *Error values. Use IsAuthError,
// IsUnreachable and IsTLSError to pick a status condition, CodeOf and
// IsRetriable for the Kafka error code a broker answered with, and errors.Is
// with ErrTopicExists / ErrTopicNotFound for control flow. Messages keep the
// Kafka error code name (for example "SASL_AUTHENTICATION_FAILED: ...") and
// never contain the SASL password.
//
// The manager's factory is a BatchingFactory: the describes, creates, config
// changes and partition increases of every resource on one connection go as
// one request per kind per batch window (--kafka-admin-batch-window), and each
// caller is answered for its own topics alone.
//
// A new Kafka call is a method of Admin (or Scanner), implemented in franz
// (tested against kfake) and in kafkafake; a figure read for many resources at
// once belongs in internal/kafkastats. franz-go's wire types (kgo, kmsg, kerr)
// never leave franz.
package kafka
