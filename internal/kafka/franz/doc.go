// Package franz implements the interfaces of internal/kafka with franz-go:
// a Factory that builds and caches one kadm admin client per Connection
// (closing idle ones on a sweep), reads ranges of records with a consumer
// client (Scan), and classifies franz-go, network and TLS failures into
// *kafka.Error values that keep the Kafka error code and never the SASL
// password.
//
// Only the command that wires the operator (cmd/manager), the dead-letter
// test stack (internal/dlqtest) and tests import it; the controllers see
// internal/kafka alone, and franz-go's types do not leave this package. The
// tests run it against kfake, an in-process Kafka-protocol broker.
package franz
