// Package controllers holds the operator's reconcilers, one per kind of the retry.retryops.dev API,
// and what is theirs alone. Per kind: <kind>_controller.go (the reconciler, its setup and watches,
// its list of phases and Reconcile), <kind>_<phase>.go (the phases), and <kind>_status.go
// (one function per condition and figure of its status, table-tested). The ConsumerPipeline
// reconcile is a list of phases, each returning a documented result that the later ones take
// (references: pipelineRefs, claims: pipelineClaim, topics: pipelineTopics, figures: pipelineLive,
// children: pipelineChildren), the status built from all of them; so is the DeadLetterQueue
// reconcile (topics: dlqTopics, offsets: dlqOffsets, figures: dlqLive, states: dlqStates, gathered
// in dlqRun). A phase ends the run as endStep says. The requeues a reconcile's parts ask for merge
// in one function (soonest). Shared by the kinds: steps.go (how a phase ends a run, the problem
// type that makes conditions, the status writer, and the skeleton of the kinds that own topics:
// finalizer, created topics recorded, bounded deletion), finish.go (the status patched whatever the
// phases met, the requeues merged), constants.go, and setup.go (options, wiring, indexes, predicates,
// and the RBAC markers). Beside them: cache.go (what the manager caches: CacheOptions, Secrets
// never, owned kinds only with the operator's label, alert-rule data as digests), progress.go
// (which changes of Ready are worth an event: on the way to Ready a Normal one, a reference missing
// past ReferenceGracePeriod one Warning per episode), stalled.go (the kstatus Stalled condition),
// recorder.go (event notes cut to the API server's 1,024 bytes), claims_cluster.go (which resource
// holds a name on a Kafka cluster) and ledger_sweep.go (the leader's sweep of the topic ledger).
// The DeadLetterAction reconciler runs each action once, on a goroutine of its own
// (deadletters.Run), one changing action per queue at a time, resumed from its checkpoint.
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
//
// # Adding to it
//
//   - A kind: its types in api/v1alpha1, a reconciler in <kind>_controller.go with its phases and
//     status functions as above, registered in setup.go with its RBAC markers, and a sample in
//     config/samples. A kind that owns Kafka topics uses the skeleton of steps.go: the finalizer
//     first, the status patched whatever the phases met (finishReconcile), a bounded deletion,
//     and every topic it creates recorded in the topic ledger before it is created, never taken
//     from its status or its own annotations, which its author could forge.
//   - A condition: its type and reasons as constants in api/v1alpha1, one set<Kind><Condition>
//     function in <kind>_status.go with a table test, summarised by Ready. A phase reports a problem
//     by returning a *problem: a user error (a Warning event, then a wait for a change of the spec)
//     or a transient one (returned, for the work queue's backoff); a plain error still reaches Ready
//     through the deferred patch. Every user error also sets Stalled (setStalled, called by the
//     kind's status function), so a problem is a user error only when a person must change something.
//   - A child object: a pure function in internal/render (golden-tested), applied with
//     internal/apply from the kind's children step, Owns(...) in its SetupWithManager, and its RBAC
//     marker. An object of the child's name that the resource does not control is never adopted: it
//     is a ChildConflict.
//   - A read or write of the API: through the manager's client (the cache) for the kinds the
//     controllers watch or own; a read of a kind with no informer fails rather than start a
//     cluster-wide one. Secrets only with uncached GETs, never listed or watched. Then the marker in
//     setup.go with exactly that verb and the expected verbs in rbac_test.go: the least-privilege
//     test fails on any request a running manager sends that its role does not grant.
//   - A Kafka call: a method of internal/kafka's Admin or Scanner (see there), never a client here.
package controllers
