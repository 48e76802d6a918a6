// Package dispatcher is the data plane of retry-operator: a Kafka consumer that reads a pipeline's
// source topic and retry tiers, delivers each record to a Handler (the HTTP sink of the dispatcher
// binary, or the user's function in library mode, sdk/retryloop), classifies failures with the
// retry core, and writes each failed record to the retry tier of its next attempt or to the dead
// letter topic. An offset is committed only once its record has finished: delivered, dropped, or
// written (and acknowledged) to a retry tier or the dead letter topic.
//
// # How records flow
//
// One poll loop fetches from every assigned partition and appends the records to per-partition
// queues. A scheduler, run under one lock after every poll, completion and timer, starts deliveries
// on a pool of workers, up to delivery.maxInFlight in all: from a source partition in offset order,
// one record at a time in Ordered mode; from a retry tier, each record at its own due time (header
// retryops.due), earliest first whatever its offset. A tier partition reads ahead within a window
// (maxBufferedRecords records, at least 16 MiB) and is paused (franz-go PauseFetchPartitions) only
// while that window is full or while nothing it holds, nor anything behind the last record fetched
// (the latest timestamp of the retries fetched plus the tier's shortest delay; a Replay's record,
// due when written, is no retry's and does not count), can fall due within resumeLead; a timer
// runs the scheduler at the next due time. So nothing sleeps, the policy's jitter survives the tier,
// and the source topic keeps flowing. A Retry-After wait goes to the tier whose delays cover it
// (settings.retryTier), which keeps each tier roughly in due order.
// With a circuit breaker, every partition is paused while the breaker is open.
//
// Back-pressure: at most delivery.maxInFlight deliveries run at once, and at most
// delivery.maxUncommittedRecords finished source records wait for their commit (no delivery from
// the source starts while they do; a retry tier's finished records are bounded by its window).
// Otherwise records wait in the partition queues. Once the source's queues hold delivery.maxBufferedRecords: with retry tiers,
// the source partitions are paused until half of that drained, and polling goes on for the tiers (so
// a retry is not late behind a source backlog); without tiers, the poll loop stops polling, and
// franz-go stops fetching as soon as its one buffered fetch per broker is full (pausing would
// discard that buffered fetch; not polling keeps the data and resumes at once).
//
// # Replays
//
// A dead letter is replayed by writing it to the pipeline's first retry tier with
// retryops.attempts "0", its due time the replay time, and the replay headers (headers.ReplayHeaders
// builds them; headers/replay.go documents the contract). Such a record is a fresh first delivery:
// attempt 1, no first failure, its deadline counted from its due time, the Idempotency-Key of its
// original coordinates; if it fails it goes through the tiers as any record does, and every retry
// record and its new dead letter carry retryops.replay.of and retryops.replay.count unchanged.
// A tier record with 0 attempts and no valid replay headers, or with a replay header invalid, is
// dead-lettered as malformed, and so is one whose retryops.pipeline names another pipeline (the
// replay carries the one it is replayed into). A replay is fetched no later than a record of the first tier would be:
// within the tier's shortest delay after it was written, unless the tier's look-ahead window is
// full of records not yet due.
//
// # Commits
//
// Offsets are committed per partition up to the lowest unfinished record, by one committer: every
// commitInterval, or at once when half of maxUncommittedRecords wait. So a crash redelivers at most
// maxInFlight + maxUncommittedRecords source records, and of each retry-tier partition at most its
// look-ahead window (records finished out of order behind one not yet due). Rebalances are blocked while a poll's records are
// being queued (BlockRebalanceOnPoll); a revoked partition stops dispatching, waits up to
// drainTimeout for its deliveries, commits what finished and is dropped: its context is cancelled
// (the deliveries still under way and its dead-letter retries end) and every slot it held is
// released at once. A stop (context cancelled) does the same for every partition and leaves the
// group, every step after the drain bounded (ShutdownAfterDrain).
//
// # Time
//
// Every time the engine reads and every timer it sets come from one clock, Options.Clock
// (k8s.io/utils/clock; the real clock by default), so that tests drive due times, the commit
// interval and the drain timeout with a fake clock.
//
// # Files
//
// In the order a record meets them:
//
//	engine.go     Options, the Engine and its fixed settings, New, Run
//	clients.go    the franz-go clients: connection (TLS, SASL), consumer-group and producer options
//	poll.go       the poll loop: fetched records into per-partition queues (partState)
//	record.go     a consumed record (item): its retryops.* headers parsed (a replayed dead letter's
//	              included), what the handler sees
//	scheduler.go  which records start now, pausing tier partitions, and the timer for the next due time
//	repark.go     a tier's head due much later than its tier's delays, written again to the tier's tail
//	deliver.go    the workers: delivery to the Handler and the decision on its outcome (a fate)
//	batch.go      delivery.batch: the batch being filled, its delivery to the BatchHandler, a
//	              Result per record finished as deliver.go finishes one record
//	records.go    the records written after a failure: retry, dead letter, without value, stripped
//	produce.go    the one write path to a retry tier or the dead letter topic, and its acknowledgement
//	deadletter.go a failed dead-letter write: the escalation (escalate), retried, stripped or stuck
//	settle.go     a record's fate taking effect: the only caller of the tracker's finish and abandon
//	commits.go    the committer
//	tracker.go    partitionTracker: a partition's records from fetch to commit (plain data)
//	rebalance.go  assigned, revoked and lost partitions; the graceful stop
//
// and around the engine: handler.go (Handler, Delivery, Result), httpsink.go (the HTTP sink),
// server.go (metrics and health endpoints), health.go (what liveness and readiness check: the poll
// loop's heartbeat, deliveries past their bound, partitions lost), kafkahealth.go (Kafka refusing
// the consumer: authentication, TLS, ACLs), circuitreport.go (reporting the breaker's state and
// Kafka's refusal).
//
// # A new outcome
//
// The decision goes in sdk/retry (pure, table- and fuzz-tested), its header names in sdk/headers,
// its configuration in sdk/config, and the action in deliver.go and, when it writes a record,
// records.go and produce.go. A dead-letter reason is a headers.Reason* constant, and the
// DeadLetterQueue's status counts it by reason.
//
// Only cmd/dispatcher and sdk/retryloop import this package; its tests use dispatchertest.
package dispatcher
