// Package kafkastats reads the live figures of Kafka topics and consumer groups for every resource
// of the operator at a constant cost per Kafka connection, whatever the number of topics:
//
//   - Offsets: one ListOffsets round for the start and end offsets of every topic of a connection;
//   - Commits: one OffsetFetch round for the commits of every consumer group of a connection;
//   - Tallies: one scan (one consumer client, as few Fetch requests as the new records need) for
//     the dead letters that arrived in every queue of a connection since the last refresh, counted
//     by reason, error type and pipeline (Tally); none when nothing arrived.
//
// Each round serves every resource (a member, named by the caller) that refreshes within the same
// interval. The package reaches Kafka only through the interfaces of internal/kafka (Admin,
// Scanner), so it carries no client library; the time comes from an injected clock.
package kafkastats
