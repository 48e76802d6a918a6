// Package kafkafake provides Fake, an in-memory kafka.Admin (and kafka.ClientFactory: every
// connection reaches the same Fake, which also keeps the records produced to it and scans them) for
// controller unit tests: it keeps topics, offsets, records and group commits in maps, mirrors the
// semantics of the real implementation (missing topics, idempotent deletes,
// typed errors), records every call and lets tests inject errors per method.
package kafkafake

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Method names, used in Call.Method and for error injection.
const (
	// DescribeTopics names kafka.Admin.DescribeTopics.
	DescribeTopics = "DescribeTopics"
	// CreateTopic names kafka.Admin.CreateTopic.
	CreateTopic = "CreateTopic"
	// AlterTopicConfigs names kafka.Admin.AlterTopicConfigs.
	AlterTopicConfigs = "AlterTopicConfigs"
	// AddPartitions names kafka.Admin.AddPartitions.
	AddPartitions = "AddPartitions"
	// DeleteTopic names kafka.Admin.DeleteTopic.
	DeleteTopic = "DeleteTopic"
	// TopicIDs names kafka.Admin.TopicIDs.
	TopicIDs = "TopicIDs"
	// ListOffsets names kafka.Admin.ListOffsets.
	ListOffsets = "ListOffsets"
	// DeleteRecordsBefore names kafka.Admin.DeleteRecordsBefore.
	DeleteRecordsBefore = "DeleteRecordsBefore"
	// GroupLag names kafka.Admin.GroupLag.
	GroupLag = "GroupLag"
	// GroupOffsets names kafka.Admin.GroupOffsets.
	GroupOffsets = "GroupOffsets"
	// Ping names kafka.Admin.Ping.
	Ping = "Ping"
)

// Call records one method invocation. Args are copies of the arguments after
// ctx, in order (for example CreateTopic: name, partitions, rf, configs).
type Call struct {
	// Method is one of the method name constants.
	Method string
	// Args are the arguments after ctx.
	Args []any
}

type topic struct {
	id      string // a new one each time the topic is created
	rf      int16
	configs map[string]string
	start   []int64 // per partition
	end     []int64
	records map[int32]map[int64]kafka.Record // what ProduceRecords wrote, by partition and offset
}

// Fake is an in-memory kafka.Admin. The zero value is not usable; call New.
// It is safe for concurrent use.
type Fake struct {
	// DefaultPartitions is used by CreateTopic for partitions == -1
	// (default 1).
	DefaultPartitions int32
	// DefaultReplicationFactor is used by CreateTopic for rf == -1
	// (default 1).
	DefaultReplicationFactor int16
	// Clock stamps the records ProduceRecords writes (the real clock when nil). Set it before use.
	Clock clock.PassiveClock

	mu      sync.Mutex
	topics  map[string]*topic
	commits map[string]map[string]map[int32]int64 // group -> topic -> partition -> offset
	errs    map[string]error
	queued  map[string][]error
	calls   []Call
	ids     int // topic IDs handed out

	clusterID  string            // SetClusterID without servers
	clusterIDs map[string]string // serversKey -> cluster ID
}

var _ kafka.Admin = (*Fake)(nil)

// New returns an empty Fake.
func New() *Fake {
	return &Fake{
		DefaultPartitions:        1,
		DefaultReplicationFactor: 1,
		topics:                   make(map[string]*topic),
		commits:                  make(map[string]map[string]map[int32]int64),
		errs:                     make(map[string]error),
		queued:                   make(map[string][]error),
	}
}

// AddTopic creates or replaces a topic with all offsets at 0.
func (f *Fake) AddTopic(name string, partitions int32, rf int16, configs map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.topics[name] = &topic{
		id:      f.newID(),
		rf:      rf,
		configs: maps.Clone(nonNil(configs)),
		start:   make([]int64, partitions),
		end:     make([]int64, partitions),
	}
}

// SetOffsets sets the start and end offsets of an existing partition. It
// reports false if the topic or partition does not exist.
func (f *Fake) SetOffsets(topicName string, partition int32, start, end int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[topicName]
	if !ok || partition < 0 || int(partition) >= len(t.end) {
		return false
	}
	t.start[partition], t.end[partition] = start, end
	return true
}

// Produce advances the end offset of a partition by n records. It reports
// false if the topic or partition does not exist.
func (f *Fake) Produce(topicName string, partition int32, n int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[topicName]
	if !ok || partition < 0 || int(partition) >= len(t.end) {
		return false
	}
	t.end[partition] += n
	return true
}

// Commit records a committed offset for a group.
func (f *Fake) Commit(group, topicName string, partition int32, offset int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.commits[group] == nil {
		f.commits[group] = make(map[string]map[int32]int64)
	}
	if f.commits[group][topicName] == nil {
		f.commits[group][topicName] = make(map[int32]int64)
	}
	f.commits[group][topicName][partition] = offset
}

// SetError makes every later call of method fail with err (after being
// recorded); nil clears it. Queued FailNext errors take precedence.
func (f *Fake) SetError(method string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.errs, method)
		return
	}
	f.errs[method] = err
}

// FailNext queues errors returned by the next calls of method, one per call.
func (f *Fake) FailNext(method string, errs ...error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued[method] = append(f.queued[method], errs...)
}

// Calls returns a copy of every recorded call, in order.
func (f *Fake) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// CallsTo returns the recorded calls of one method, in order.
func (f *Fake) CallsTo(method string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// CallCount returns how many times method was called.
func (f *Fake) CallCount(method string) int { return len(f.CallsTo(method)) }

// ResetCalls forgets the recorded calls.
func (f *Fake) ResetCalls() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

// Topic returns a snapshot of one topic as DescribeTopics would, without
// recording a call.
func (f *Fake) Topic(name string) kafka.TopicInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.describe(name)
}

// Offsets returns a snapshot of a topic's offsets, without recording a call;
// nil if the topic does not exist.
func (f *Fake) Offsets(name string) []kafka.PartitionOffsets {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offsets(name)
}

// begin records the call and returns the injected error, if any. f.mu must
// be held.
func (f *Fake) begin(ctx context.Context, method string, args ...any) error {
	f.calls = append(f.calls, Call{Method: method, Args: args})
	if q := f.queued[method]; len(q) > 0 {
		f.queued[method] = q[1:]
		return q[0]
	}
	if err := f.errs[method]; err != nil {
		return err
	}
	return ctx.Err()
}

func (f *Fake) describe(name string) kafka.TopicInfo {
	t, ok := f.topics[name]
	if !ok {
		return kafka.TopicInfo{Name: name}
	}
	return kafka.TopicInfo{
		Name:              name,
		ID:                t.id,
		Exists:            true,
		Partitions:        int32(len(t.end)),
		ReplicationFactor: t.rf,
		Configs:           maps.Clone(t.configs),
	}
}

func (f *Fake) offsets(name string) []kafka.PartitionOffsets {
	t, ok := f.topics[name]
	if !ok {
		return nil
	}
	out := make([]kafka.PartitionOffsets, len(t.end))
	for p := range t.end {
		out[p] = kafka.PartitionOffsets{Partition: int32(p), Start: t.start[p], End: t.end[p]}
	}
	return out
}

func notFound(op, name string) error {
	return brokerError(fmt.Sprintf("%s %q", op, name), kafka.KindTopicNotFound, codeUnknownTopic, true, "")
}

// The Kafka error codes the fake answers with.
const (
	codeUnknownTopic      = "UNKNOWN_TOPIC_OR_PARTITION"
	codeTopicExists       = "TOPIC_ALREADY_EXISTS"
	codeInvalidPartitions = "INVALID_PARTITIONS"
	codeOffsetOutOfRange  = "OFFSET_OUT_OF_RANGE"
)

// brokerError is the error of op that a broker answered with code, as the real implementation
// reports it: a *kafka.Error carrying the code.
func brokerError(op string, kind kafka.Kind, code string, retriable bool, detail string) error {
	cause := errors.New(code + detail)
	if kind == kafka.KindTopicNotFound {
		cause = fmt.Errorf("%w: %w", kafka.ErrTopicNotFound, cause)
	}
	return kafka.NewError(op, kind, cause, "").WithCode(code, retriable)
}

// DescribeTopics implements kafka.Admin.
func (f *Fake) DescribeTopics(ctx context.Context, names ...string) (map[string]kafka.TopicInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, DescribeTopics, slices.Clone(names)); err != nil {
		return nil, err
	}
	out := make(map[string]kafka.TopicInfo, len(names))
	for _, n := range names {
		if n != "" {
			out[n] = f.describe(n)
		}
	}
	return out, nil
}

// DeleteTopic implements kafka.Admin. Like Kafka, it also drops the groups'
// committed offsets for the topic.
func (f *Fake) DeleteTopic(ctx context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, DeleteTopic, name); err != nil {
		return err
	}
	delete(f.topics, name)
	for _, byTopic := range f.commits {
		delete(byTopic, name)
	}
	return nil
}

// ListOffsets implements kafka.Admin.
func (f *Fake) ListOffsets(ctx context.Context, topics ...string) (map[string][]kafka.PartitionOffsets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, ListOffsets, slices.Clone(topics)); err != nil {
		return nil, err
	}
	out := make(map[string][]kafka.PartitionOffsets)
	for _, n := range topics {
		if offs := f.offsets(n); offs != nil {
			out[n] = offs
		}
	}
	return out, nil
}

// DeleteRecordsBefore implements kafka.Admin.
func (f *Fake) DeleteRecordsBefore(ctx context.Context, topicName string, before map[int32]int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, DeleteRecordsBefore, topicName, maps.Clone(before)); err != nil {
		return err
	}
	if len(before) == 0 {
		return nil
	}
	t, ok := f.topics[topicName]
	if !ok {
		return notFound("delete records of topic", topicName)
	}
	// Validate everything first so a failure changes nothing.
	for p, off := range before {
		if p < 0 || int(p) >= len(t.end) {
			return brokerError(fmt.Sprintf("delete records of topic %q: partition %d", topicName, p), kafka.KindTopicNotFound, codeUnknownTopic, true, "")
		}
		if off < -1 || off > t.end[p] {
			return brokerError(fmt.Sprintf("delete records of topic %q: partition %d offset %d", topicName, p, off), kafka.KindOther, codeOffsetOutOfRange, false, "")
		}
	}
	for p, off := range before {
		if off == -1 {
			off = t.end[p]
		}
		if off > t.start[p] {
			t.start[p] = off
		}
	}
	return nil
}

// GroupLag implements kafka.Admin.
func (f *Fake) GroupLag(ctx context.Context, groups ...string) (map[string]kafka.GroupLagInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, GroupLag, slices.Clone(groups)); err != nil {
		return nil, err
	}
	out := make(map[string]kafka.GroupLagInfo, len(groups))
	for _, g := range groups {
		if g == "" {
			continue
		}
		info := kafka.GroupLagInfo{Group: g, Topics: map[string][]kafka.PartitionLag{}}
		for topicName, ps := range f.commits[g] {
			var lags []kafka.PartitionLag
			for _, p := range slices.Sorted(maps.Keys(ps)) {
				pl := kafka.PartitionLag{Partition: p, Committed: ps[p], End: -1, Lag: -1}
				if t, ok := f.topics[topicName]; ok && int(p) < len(t.end) {
					pl.End = t.end[p]
					pl.Lag = max(pl.End-pl.Committed, 0)
				}
				lags = append(lags, pl)
			}
			if len(lags) > 0 {
				info.Topics[topicName] = lags
			}
		}
		out[g] = info
	}
	return out, nil
}

// GroupOffsets implements kafka.Admin.
func (f *Fake) GroupOffsets(ctx context.Context, groups ...string) (map[string]kafka.GroupOffsets, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, GroupOffsets, slices.Clone(groups)); err != nil {
		return nil, err
	}
	out := make(map[string]kafka.GroupOffsets, len(groups))
	for _, g := range groups {
		if g == "" {
			continue
		}
		info := kafka.GroupOffsets{Group: g, Topics: map[string]map[int32]int64{}}
		for topicName, ps := range f.commits[g] {
			if len(ps) > 0 {
				info.Topics[topicName] = maps.Clone(ps)
			}
		}
		out[g] = info
	}
	return out, nil
}

// Ping implements kafka.Admin.
func (f *Fake) Ping(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.begin(ctx, Ping)
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
