// Package kafka is the operator's only view of Kafka: a Connection (plain
// data resolved from Secrets by the controllers), a Factory that builds and
// caches franz-go clients per Connection, and the small Admin interface the
// controllers call to reconcile topics and report offsets and consumer-group
// lag.
//
// Everything speaks the real Kafka protocol through franz-go (kgo/kadm), so
// it works unchanged against Apache Kafka, Strimzi, Redpanda or MSK; the
// tests run it against kfake, an in-process Kafka-protocol broker.
//
// Errors returned by Admin methods are *Error values. Use IsAuthError,
// IsUnreachable and IsTLSError to pick a status condition, and errors.Is with
// ErrTopicExists / ErrTopicNotFound for control flow. Messages keep the Kafka
// error code name (for example "SASL_AUTHENTICATION_FAILED: ...") and never
// contain the SASL password.
//
// The kafkafake subpackage provides an in-memory Admin for controller unit
// tests.
package kafka
