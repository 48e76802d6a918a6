package kafka

import (
	"context"
	"time"
)

// MaxClusterIDBytes bounds a cluster ID: a longer one from a broker counts as none (a real Kafka's is
// 22 characters).
const MaxClusterIDBytes = 256

// Admin is the Kafka administration surface the controllers use. Every
// method is bounded by the factory's request timeout (or an earlier ctx
// deadline) and returns errors of type *Error, classifiable with
// IsAuthError, IsUnreachable, IsTLSError, CodeOf and errors.Is against the
// package sentinels. Implementations are safe for concurrent use.
type Admin interface {
	// DescribeTopics returns one TopicInfo per distinct requested name.
	// Missing topics come back with Exists=false, not as an error. It
	// issues one Metadata request and, if any topic exists, one
	// DescribeConfigs request.
	DescribeTopics(ctx context.Context, names ...string) (map[string]TopicInfo, error)

	// CreateTopic creates a topic. partitions and rf may be -1 to use the
	// broker defaults. An existing topic yields an error matching
	// ErrTopicExists.
	CreateTopic(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error

	// AlterTopicConfigs incrementally sets the given topic configs
	// (IncrementalAlterConfigs SET); configs not named are untouched. A
	// missing topic yields an error matching ErrTopicNotFound.
	AlterTopicConfigs(ctx context.Context, name string, set map[string]string) error

	// AddPartitions grows the topic to total partitions. It is a no-op
	// when the topic already has total partitions and an error when it
	// has more (Kafka cannot remove partitions). A missing topic yields an
	// error matching ErrTopicNotFound.
	AddPartitions(ctx context.Context, name string, total int32) error

	// DeleteTopic deletes a topic; deleting a missing topic returns nil.
	DeleteTopic(ctx context.Context, name string) error

	// TopicIDs returns the topic ID of every existing requested topic: the UUID Kafka gives a topic
	// when it is created (Metadata v10 and later, Kafka 2.8 and later), which a topic deleted and
	// created again under the same name does not keep. A topic whose brokers give no ID maps to "".
	// Missing topics are absent from the map. It issues one Metadata request.
	TopicIDs(ctx context.Context, names ...string) (map[string]string, error)

	// ListOffsets returns the start (log start) and end (high watermark)
	// offsets of every partition of every existing requested topic,
	// sorted by partition. Missing topics are absent from the map. It
	// issues one Metadata request, then one ListOffsets request per
	// partition leader for the start offsets and one for the end offsets
	// (on a single broker cluster: exactly one of each).
	ListOffsets(ctx context.Context, topics ...string) (map[string][]PartitionOffsets, error)

	// OffsetsAfter returns, for every existing topic of after, the offset of each partition's
	// first record whose timestamp is at or after after[topic] (Kafka's ListOffsets by
	// timestamp) with that record's timestamp, or offset -1 when every record of the partition is
	// older. Missing topics are absent from the map. It issues one Metadata request, then one
	// ListOffsets request per partition leader for all the topics, each with its own time (on a
	// single broker cluster: exactly one).
	OffsetsAfter(ctx context.Context, after map[string]time.Time) (map[string]map[int32]TimedOffset, error)

	// DeleteRecordsBefore moves the log start offset of the given
	// partitions of topic to the given offsets, deleting every record
	// below. An offset of -1 means the current end offset. Offsets at or
	// below the current start are a no-op; offsets past the end fail with
	// OFFSET_OUT_OF_RANGE.
	DeleteRecordsBefore(ctx context.Context, topic string, before map[int32]int64) error

	// GroupLag returns, per requested group, the committed offset, end
	// offset and lag of every partition the group committed to; partitions
	// it never committed are omitted (not estimated as end - start). It issues one OffsetFetch per group
	// coordinator (all groups batched), one Metadata request and one
	// ListOffsets request per partition leader; a client's very first call
	// also pays franz-go's coordinator and broker discovery. Groups whose
	// offsets could not be fetched carry Err and the returned error is the
	// first of those, with the map still holding every group; if the end
	// offsets cannot be listed the map is nil. A group that does not exist
	// comes back with no topics and no error.
	GroupLag(ctx context.Context, groups ...string) (map[string]GroupLagInfo, error)

	// GroupOffsets returns, per requested group, the offsets it committed:
	// GroupLag without the end offsets, for callers that list them anyway.
	// It issues one OffsetFetch per group coordinator (all groups batched)
	// and nothing else, once franz-go knows the coordinators. Groups whose
	// offsets could not be fetched carry Err and the returned error is the
	// first of those, with the map still holding every group. A group that
	// does not exist comes back with no topics and no error.
	GroupOffsets(ctx context.Context, groups ...string) (map[string]GroupOffsets, error)

	// Ping issues a Metadata request (no topics) to check connectivity and
	// authentication. Use IsUnreachable / IsAuthError / IsTLSError on the
	// error to set a status condition.
	Ping(ctx context.Context) error

	// ClusterID returns the ID of the cluster the client reaches, as the brokers' Metadata answers
	// give it (Kafka 0.10.1 and later): what identifies a cluster whatever its bootstrap servers are
	// called (127.0.0.1 or localhost, a Service's short or long DNS name, one broker or all). The ID
	// of the latest Metadata answer the client received, whichever call asked for it, is remembered
	// for the client's life: a call that finds one issues no request, even while the brokers are
	// unreachable; otherwise it issues one Metadata request (no topics). A cluster that gives no ID
	// is an error.
	ClusterID(ctx context.Context) (string, error)
}

// TopicInfo describes one topic as returned by DescribeTopics.
type TopicInfo struct {
	// Name is the topic name.
	Name string
	// ID is the topic's ID (see Admin.TopicIDs), "" when the brokers give none or the topic does
	// not exist.
	ID string
	// Exists is false if the topic does not exist; the other fields are
	// then zero.
	Exists bool
	// Partitions is the partition count.
	Partitions int32
	// ReplicationFactor is the replica count of the lowest numbered
	// partition.
	ReplicationFactor int16
	// Configs holds only the topic-level overrides (config source
	// DYNAMIC_TOPIC_CONFIG); broker and default values are omitted. Values
	// of sensitive configs are "". Non-nil when Exists.
	Configs map[string]string
}

// PartitionOffsets are the start and end offsets of one partition.
type PartitionOffsets struct {
	// Partition is the partition number.
	Partition int32
	// Start is the log start offset (first offset still readable).
	Start int64
	// End is the high watermark (offset of the next record written).
	End int64
}

// PartitionLag is the lag of a group on one partition.
type PartitionLag struct {
	// Partition is the partition number.
	Partition int32
	// Committed is the group's committed offset.
	Committed int64
	// End is the partition's high watermark, or -1 if it could not be
	// listed (topic or partition deleted).
	End int64
	// Lag is End-Committed, floored at 0, or -1 when End is unknown.
	Lag int64
}

// GroupLagInfo is the lag of one consumer group.
type GroupLagInfo struct {
	// Group is the group ID.
	Group string
	// Topics maps each topic the group committed to onto its partitions'
	// lag, sorted by partition. A group that committed nothing (or does
	// not exist) has an empty map.
	Topics map[string][]PartitionLag
	// Err is non-nil if the group's offsets could not be fetched (for
	// example GROUP_AUTHORIZATION_FAILED); Topics is then empty.
	Err error
}

// Total returns the summed lag of topic over its partitions, ignoring
// partitions with unknown lag (-1).
func (g GroupLagInfo) Total(topic string) int64 {
	var sum int64
	for _, p := range g.Topics[topic] {
		if p.Lag > 0 {
			sum += p.Lag
		}
	}
	return sum
}

// TotalAll returns the summed lag over all topics.
func (g GroupLagInfo) TotalAll() int64 {
	var sum int64
	for t := range g.Topics {
		sum += g.Total(t)
	}
	return sum
}

// GroupOffsets are the offsets one consumer group committed.
type GroupOffsets struct {
	// Group is the group ID.
	Group string
	// Topics maps each topic the group committed to onto the committed offset of each partition
	// (the offset of the next record the group will read). Partitions never committed are absent. A
	// group that committed nothing (or does not exist) has an empty map.
	Topics map[string]map[int32]int64
	// Err is non-nil if the group's offsets could not be fetched (for example
	// GROUP_AUTHORIZATION_FAILED); Topics is then empty.
	Err error
}

// OffsetRange is a half-open range of offsets [From, To) of one partition.
type OffsetRange struct {
	From, To int64
}

// Record is a record read by a Scanner: what the operator reads of it.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	// Key and Value are the record's key and value (nil when absent), valid, like Headers, only
	// during the Scanner's call to fn.
	Key, Value []byte
	Headers    []Header
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// Scanner reads ranges of records.
type Scanner interface {
	// Scan reads the records of the given ranges (topic → partition → range) over conn and calls
	// fn for each, in offset order per partition. It returns when every range was read, or with an
	// error when ctx ends first. A record's Headers, and their values, are valid only during the
	// call to fn (an implementation reuses them): fn copies what it keeps. An implementation holds
	// a bounded amount of records at a time, whatever the size of the ranges.
	Scan(ctx context.Context, conn Connection, ranges map[string]map[int32]OffsetRange, fn func(Record)) error
}

// ProduceRecord is one record to write with a Producer.
type ProduceRecord struct {
	// Key and Value of the record (nil for none).
	Key, Value []byte
	// Headers of the record, in order.
	Headers []Header
	// Timestamp of the record; zero means the time of the produce.
	Timestamp time.Time
	// Partition to write to; -1 lets the producer choose by the key's hash (the Java client's
	// murmur2 partitioning, so a key keeps its partition whatever client wrote it).
	Partition int32
}

// ProduceResult is the outcome of one ProduceRecord.
type ProduceResult struct {
	// Partition and Offset where the record was written, when Err is nil.
	Partition int32
	Offset    int64
	// Err is why the record was not acknowledged: a *Error, or the context's error.
	Err error
}

// Producer writes records.
type Producer interface {
	// ProduceRecords writes records to topic over conn with an idempotent producer (acks from all
	// in-sync replicas, no duplicates on the producer's own retries) and returns once every record
	// was acknowledged or failed: results[i] is the outcome of records[i], in the same order. The
	// error is nil when every record was acknowledged, otherwise the first failure (and results say
	// which). A record whose produce failed, or was cut short by ctx, may nevertheless have been
	// written. It fails without producing when conn is invalid or the factory is closed.
	ProduceRecords(ctx context.Context, conn Connection, topic string, records []ProduceRecord) ([]ProduceResult, error)
}

// AdminFactory hands out the admin client of a connection.
type AdminFactory interface {
	// Admin returns the (cached) admin client of conn. It fails if conn is invalid (a
	// *ConfigError) or the factory is closed (an error matching ErrClosed).
	Admin(ctx context.Context, conn Connection) (Admin, error)
	// Forget closes and drops the client cached under key (a Connection.Key) and reports whether
	// there was one.
	Forget(key string) bool
}

// ClientFactory is all the operator asks of a Kafka client implementation: admin clients per
// connection, record scans and record produces.
type ClientFactory interface {
	AdminFactory
	Scanner
	Producer
}

// TimedOffset is where a partition's records reach a time (Admin.OffsetsAfter): the offset of the
// first record at or after it, and that record's timestamp in Unix milliseconds (as Kafka keeps
// it). Offset -1 (and Timestamp -1) when every record is older.
type TimedOffset struct {
	Offset    int64
	Timestamp int64
}
