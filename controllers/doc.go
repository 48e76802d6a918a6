// Package controllers holds the operator's reconcilers, one per kind of the retry.retryops.dev API,
// and what is theirs alone. Per kind: <kind>_controller.go (the reconciler, its setup and watches,
// its list of steps and Reconcile), <kind>_<steps>.go (the steps), and <kind>_status.go (one
// function per condition and figure of its status, table-tested). Shared by the kinds: steps.go
// (the step runner, the problem type that makes conditions, the status writer, and the skeleton of
// the kinds that own topics: status patched whatever the steps return, finalizer, created topics
// recorded, bounded deletion), constants.go, and setup.go (options, wiring, indexes, predicates).
//
// What is not a reconciler's lives in internal/ packages: Kafka behind internal/kafka (the Admin
// interface, errors, connections and their registry, topic planning), the batched live figures in
// internal/kafkastats, spec.kafka and topic claims in internal/kafkaspec, PrometheusRule discovery
// and alert rules in internal/ruleapi, server-side apply of owned objects in internal/apply,
// optimistic-locked writes in internal/optimistic, the deletion bound in internal/deletionbound,
// child objects rendered by internal/render.
//
// This package imports no Kafka client library (go list -deps ./controllers | grep franz-go prints
// nothing): the Kafka client factory, built with franz-go by internal/kafka/franz, is injected
// through Options.Kafka by the command that wires the operator.
package controllers
