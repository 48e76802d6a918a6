// Package deadletters is the engine of dead-letter operations: what a dead letter is (Entry, read
// from a record of a dead letter topic), the record of decisions on them (State, kept in a compacted
// topic beside the queue, StateTopic), selectors (Compile, Matcher), and Run, which executes one
// DeadLetterAction (Replay, Resolve, Ignore or Purge) over a snapshot of the queue. It reaches Kafka
// only through the internal/kafka interface, and is used by the DeadLetterAction reconciler and by
// the read API. It knows neither franz-go nor the controllers nor the dispatcher; its tests run it
// through internal/kafka/franz against kfake, and Entry and the record of decisions are fuzzed.
//
// Beside Run: Survey counts a queue's dead letters by state for the reconciler and finds what to
// tidy (tombstones, legacy decisions); a read-from record (readfrom.go, written after a survey)
// says where a reader of the record of decisions may start, so that the deadletters API does not
// read again the decisions on dead letters long gone; and every Replay target is checked against
// the topic ledger where it is written (target_check.go, Options.Holders).
//
// # Running an action
//
// The caller (the reconciler) owns the action's status and drives Run:
//
//  1. On the first run, capture the snapshot (Snapshot: every partition's end offset, from
//     Admin.ListOffsets) and keep it in status.snapshot (OffsetsToStatus). Set phase Running and
//     startTime.
//  2. Call Run with Options{Spec, Ref (namespace, name, uid), Topic, Conn, Kafka, Snapshot:
//     OffsetsFromStatus(status.snapshot), Resume: FromStatus(&status) (nil on the first run),
//     Target (Replay), OnProgress}. OnProgress is called on Run's goroutine at most every
//     ProgressEvery dead letters or ProgressInterval, always with a durable checkpoint: patch the
//     status with Progress.ApplyTo.
//  3. Run returns the final Progress: ApplyTo it, then phase Succeeded (Complete). On an error the
//     returned Progress still holds a durable checkpoint: keep it and run again later (Resume) for
//     an error worth retrying, or set phase Failed. Cancel ctx to stop (the action was deleted, the
//     manager stops).
//
// Run never considers a dead letter at or beyond the snapshot, so the records it replays that fail
// again and come back to the queue are not picked up by the same action. It writes a decision only
// after the produce of the replay was acknowledged, and moves the checkpoint only over decisions
// written: a restarted action produces again at most the batch that was in flight
// (MaxReplayBatch records), and counts those in Progress.Duplicates.
//
// # Replay
//
// A replayed record has the dead letter's key, value and own headers (not retryops.*), plus the
// headers of the replay contract (headers.ReplayHeaders): retryops.replay.of naming the dead letter,
// retryops.replay.count one more than the replays known (the dead letter's header or the record of
// decisions, whichever is higher), retryops.original.* copied (so the sink sees the original
// Idempotency-Key), retryops.attempts "0" and retryops.due now. A dead letter replayed
// spec.maxReplays times already is skipped (SkipReplayLimit), and so is, without spec.target, the
// dead letter of a record of another pipeline's retry tier (SkipOtherPipeline): it names the
// pipeline that refused the record, whose sink it was kept from. The rate is spec.rate.recordsPerSecond:
// no more than rate records go in any second, the n-th record no earlier than n/rate after the
// first, and a run that fell behind (a slow scan or Kafka) makes up at most one batch at once,
// measured with Options.Clock.
//
// # Purge
//
// Per partition, the longest prefix of dead letters that all match (state among the selected ones,
// never Pending; dead-lettered before selector.before; every other criterion) is deleted with
// Admin.DeleteRecordsBefore, and their decisions tombstoned. The first dead letter that does not
// match ends the prefix and is reported (Progress.Blocking, SkipBlocksPrefix). The caller must only
// run Purge on a topic the operator owns. Right before each deletion the topic's ID is read again: a
// topic deleted and created again since the run started fails the run, deleting nothing more.
//
// # The record of decisions and the topic's incarnation
//
// A decision (State) records the ID of the dead letter topic it was made on (State.TopicID, from
// Admin.TopicIDs): it belongs to the record at its key's offset in that topic only, and every reader
// (LoadStates, Survey) passes over the decisions of another ID. An unbound decision, recorded
// without an ID where the brokers gave none, belongs to whatever topic holds its offset; once the
// brokers give IDs the queue reconciler binds those on records held to the topic's ID, it
// tombstones the decisions on records that are gone (Survey), and it tombstones every unbound
// decision before it creates a deleted topic again (Unbound).
package deadletters
