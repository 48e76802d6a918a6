// Package kafkaspec turns what the retry.retryops.dev API says about Kafka into values of
// internal/kafka: the connection a resource's spec.kafka resolves to (the Secrets it names read, or
// the operator's default connection whole, within the manager's tenancy limits), the Secrets it
// references, and the claims resources lay on topics: which resource, of several naming one topic
// on one cluster, manages it.
//
// The files, by concern:
//
//   - connection.go: spec.kafka, or the default connection, to a kafka.Connection.
//   - consumer.go: the identity of the pods of a pipeline on the default connection, their
//     namespace's consumer Secret (--kafka-consumer-secret, in a Strimzi KafkaUser's shape): the
//     manager's own credentials never reach a pod.
//   - tenancy.go: the manager's claim policy (--topic-prefix, --group-prefix,
//     --kafka-allowed-bootstrap-servers, --require-resource-credentials): the topics a resource may
//     make or adopt, the sources it may read, the groups it may join.
//   - claims.go, cluster.go: which of several claimants of a name holds it (the oldest, Winner) and
//     whether two claimants are on one cluster, told by its Kafka cluster ID (Clusters.Same).
//   - ledger.go, ledger_holders.go, ledger_sweep.go: the topic ledger, the topics the operator
//     created or adopted for each resource, one ConfigMap per resource in the manager's namespace,
//     read uncached; who holds a topic (Holders); and the sweep of records whose resource is gone,
//     run by the leader (controllers/ledger_sweep.go). A record names topics, not their cluster.
package kafkaspec
