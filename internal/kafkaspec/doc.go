// Package kafkaspec turns what the retry.retryops.dev API says about Kafka into values of
// internal/kafka: the connection a resource's spec.kafka resolves to (the Secrets it names read, or
// the operator's default connection whole, within the manager's tenancy limits), the Secrets it
// references, and the claims resources lay on topics: which resource, of several naming one topic
// on one cluster, manages it.
package kafkaspec
