package kafka

// Batched administration.
//
// Every resource on one connection gets the same Admin from the Registry, so thousands of
// reconcilers (and their resyncs) describe, create and alter topics through one client. Batching,
// the Admin NewBatching returns, gathers their calls and sends each kind of call as ONE Kafka
// request per broker per batch (Strimzi's Unidirectional Topic Operator does the same across
// KafkaTopics): describes (Metadata, then DescribeConfigs), topic-ID reads (Metadata), creates
// (CreateTopics), config alters (IncrementalAlterConfigs) and partition increases (Metadata, then
// CreatePartitions). A batch goes when its window (a few milliseconds after the first call of an
// idle queue) ends, when it holds MaxCalls calls, or, while a request of the same kind is in flight,
// as soon as that request returns: a busy connection has one request of each kind in flight and
// everything that arrives meanwhile rides the next. Reads of the same topic in one batch are asked
// once; a topic changed twice waits for the next batch (Kafka refuses a topic twice in a request).
//
// Each caller gets exactly its own answer, as the Admin it wraps would give it alone: the inner
// Admin (a BatchAdmin) reports an error per topic, so one bad topic (invalid config, taken name,
// no ACL) fails only its caller, with the same typed error; an error of the whole request (a
// timeout, the broker unreachable) goes to every caller of the batch, each under its own topic's
// name, never naming another caller's topics. The request runs on a context of its own, bounded
// by the inner Admin's request timeout: a caller whose context ends stops waiting, with its
// context's error, and its batch-mates' request goes on. Other methods go straight through.

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// TopicCreate is one topic to create (BatchAdmin.CreateTopics), as Admin.CreateTopic's arguments.
type TopicCreate struct {
	Name              string
	Partitions        int32
	ReplicationFactor int16
	Configs           map[string]string
}

// TopicResult is one topic's answer to a batched describe: Info, or Err when the brokers refused
// this topic or the whole request failed.
type TopicResult struct {
	Info TopicInfo
	Err  error
}

// BatchAdmin is an Admin that also takes the topic work of many callers in one request and answers
// per topic. Every method returns an entry for every distinct requested name (nil error: done); an
// error of the whole request is repeated for each, under that topic's operation, as the single
// topic method would report it.
type BatchAdmin interface {
	Admin
	// DescribeTopicsEach is DescribeTopics with an answer per topic; without configs it sends only
	// the Metadata request (TopicIDs) and leaves Info.Configs nil.
	DescribeTopicsEach(ctx context.Context, names []string, configs bool) map[string]TopicResult
	// CreateTopics is CreateTopic of each topic, in one CreateTopics request.
	CreateTopics(ctx context.Context, topics []TopicCreate) map[string]error
	// AlterTopicsConfigs is AlterTopicConfigs of each topic (name to configs to set), in one
	// IncrementalAlterConfigs request.
	AlterTopicsConfigs(ctx context.Context, set map[string]map[string]string) map[string]error
	// AddPartitionsEach is AddPartitions of each topic (name to total), in one Metadata and one
	// CreatePartitions request.
	AddPartitionsEach(ctx context.Context, totals map[string]int32) map[string]error
}

// Defaults of BatchOptions.
const (
	// DefaultBatchWindow is how long an idle connection's first call waits for others.
	DefaultBatchWindow = 10 * time.Millisecond
	// DefaultBatchMaxCalls is the most calls one request carries.
	DefaultBatchMaxCalls = 1000
)

// BatchOptions configure NewBatching.
type BatchOptions struct {
	// Window is how long the first call of an idle queue waits for others (DefaultBatchWindow when
	// not positive).
	Window time.Duration
	// MaxCalls is the most calls one batch carries; a queue holding that many sends at once
	// (DefaultBatchMaxCalls when not positive).
	MaxCalls int
	// Clock times the window (the real clock when nil).
	Clock clock.WithDelayedExecution
}

// describeReq is one caller's describe or topic-ID read; out is its answer.
type describeReq struct {
	names []string
	out   map[string]TopicResult
}

type createReq struct{ TopicCreate }

type alterReq struct {
	name string
	set  map[string]string
}

type growReq struct {
	name  string
	total int32
}

// Batching is the batching Admin of one connection (see the top of this file).
type Batching struct {
	mu    sync.RWMutex
	inner BatchAdmin

	describe *queue[*describeReq]
	ids      *queue[*describeReq]
	create   *queue[createReq]
	alter    *queue[alterReq]
	grow     *queue[growReq]
}

var _ Admin = (*Batching)(nil)

// NewBatching returns a batching Admin over inner.
func NewBatching(inner BatchAdmin, o BatchOptions) *Batching {
	if o.Window <= 0 {
		o.Window = DefaultBatchWindow
	}
	if o.MaxCalls <= 0 {
		o.MaxCalls = DefaultBatchMaxCalls
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	b := &Batching{inner: inner}
	b.describe = newQueue(o, nil, func(batch []*pending[*describeReq]) { b.sendDescribe(batch, true) })
	b.ids = newQueue(o, nil, func(batch []*pending[*describeReq]) { b.sendDescribe(batch, false) })
	b.create = newQueue(o, func(r createReq) string { return r.Name }, b.sendCreate)
	b.alter = newQueue(o, func(r alterReq) string { return r.name }, b.sendAlter)
	b.grow = newQueue(o, func(r growReq) string { return r.name }, b.sendGrow)
	return b
}

func newQueue[T any](o BatchOptions, key func(T) string, send func([]*pending[T])) *queue[T] {
	return &queue[T]{window: o.Window, max: o.MaxCalls, clock: o.Clock, key: key, send: send}
}

// admin is the inner Admin.
func (b *Batching) admin() BatchAdmin {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.inner
}

// setAdmin replaces the inner Admin: the factory's client of the connection, built again after its
// idle sweep closed the last one.
func (b *Batching) setAdmin(a BatchAdmin) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.inner = a
}

// Queued is the number of calls waiting for their batch to be sent.
func (b *Batching) Queued() int {
	return b.describe.queued() + b.ids.queued() + b.create.queued() + b.alter.queued() + b.grow.queued()
}

// batchContext is the context of a batch's request: no caller's, so that one caller giving up
// cancels nobody else's answer; the inner Admin bounds it by its request timeout.
func batchContext() context.Context { return context.Background() }

func (b *Batching) sendDescribe(batch []*pending[*describeReq], configs bool) {
	var names []string
	for _, p := range batch {
		names = append(names, p.req.names...)
	}
	res := b.admin().DescribeTopicsEach(batchContext(), names, configs)
	for _, p := range batch {
		p.req.out = res
	}
}

// DescribeTopics implements Admin.
func (b *Batching) DescribeTopics(ctx context.Context, names ...string) (map[string]TopicInfo, error) {
	names = distinct(names)
	if len(names) == 0 {
		return map[string]TopicInfo{}, nil
	}
	r := &describeReq{names: names}
	if err := b.describe.do(ctx, fmt.Sprintf("describe topics %q", names), r); err != nil {
		return nil, err
	}
	out := make(map[string]TopicInfo, len(names))
	for _, n := range names {
		t := r.out[n]
		if t.Err != nil {
			return nil, t.Err
		}
		// Callers of one batch share the answer: each gets its own configs to keep.
		t.Info.Configs = maps.Clone(t.Info.Configs)
		out[n] = t.Info
	}
	return out, nil
}

// TopicIDs implements Admin.
func (b *Batching) TopicIDs(ctx context.Context, names ...string) (map[string]string, error) {
	names = distinct(names)
	if len(names) == 0 {
		return map[string]string{}, nil
	}
	r := &describeReq{names: names}
	if err := b.ids.do(ctx, fmt.Sprintf("read the IDs of topics %q", names), r); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(names))
	for _, n := range names {
		t := r.out[n]
		if t.Err != nil {
			return nil, t.Err
		}
		if t.Info.Exists {
			out[n] = t.Info.ID
		}
	}
	return out, nil
}

func (b *Batching) sendCreate(batch []*pending[createReq]) {
	topics := make([]TopicCreate, len(batch))
	for i, p := range batch {
		topics[i] = p.req.TopicCreate
	}
	errs := b.admin().CreateTopics(batchContext(), topics)
	for _, p := range batch {
		p.err = errs[p.req.Name]
	}
}

// CreateTopic implements Admin.
func (b *Batching) CreateTopic(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error {
	// The request may outlive a caller who gives up and reuses its map: it sends a copy.
	return b.create.do(ctx, fmt.Sprintf("create topic %q", name), createReq{TopicCreate{Name: name, Partitions: partitions, ReplicationFactor: rf, Configs: maps.Clone(configs)}})
}

func (b *Batching) sendAlter(batch []*pending[alterReq]) {
	set := make(map[string]map[string]string, len(batch))
	for _, p := range batch {
		set[p.req.name] = p.req.set
	}
	errs := b.admin().AlterTopicsConfigs(batchContext(), set)
	for _, p := range batch {
		p.err = errs[p.req.name]
	}
}

// AlterTopicConfigs implements Admin.
func (b *Batching) AlterTopicConfigs(ctx context.Context, name string, set map[string]string) error {
	if len(set) == 0 {
		// Nothing to send; the inner Admin still checks the name.
		return b.admin().AlterTopicConfigs(ctx, name, set)
	}
	return b.alter.do(ctx, fmt.Sprintf("alter configs of topic %q", name), alterReq{name: name, set: maps.Clone(set)})
}

func (b *Batching) sendGrow(batch []*pending[growReq]) {
	totals := make(map[string]int32, len(batch))
	for _, p := range batch {
		totals[p.req.name] = p.req.total
	}
	errs := b.admin().AddPartitionsEach(batchContext(), totals)
	for _, p := range batch {
		p.err = errs[p.req.name]
	}
}

// AddPartitions implements Admin.
func (b *Batching) AddPartitions(ctx context.Context, name string, total int32) error {
	return b.grow.do(ctx, fmt.Sprintf("grow topic %q to %d partitions", name, total), growReq{name: name, total: total})
}

// DeleteTopic implements Admin.
func (b *Batching) DeleteTopic(ctx context.Context, name string) error {
	return b.admin().DeleteTopic(ctx, name)
}

// ListOffsets implements Admin.
func (b *Batching) ListOffsets(ctx context.Context, topics ...string) (map[string][]PartitionOffsets, error) {
	return b.admin().ListOffsets(ctx, topics...)
}

// OffsetsAfter implements Admin.
func (b *Batching) OffsetsAfter(ctx context.Context, after map[string]time.Time) (map[string]map[int32]TimedOffset, error) {
	return b.admin().OffsetsAfter(ctx, after)
}

// DeleteRecordsBefore implements Admin.
func (b *Batching) DeleteRecordsBefore(ctx context.Context, topic string, before map[int32]int64) error {
	return b.admin().DeleteRecordsBefore(ctx, topic, before)
}

// GroupLag implements Admin.
func (b *Batching) GroupLag(ctx context.Context, groups ...string) (map[string]GroupLagInfo, error) {
	return b.admin().GroupLag(ctx, groups...)
}

// GroupOffsets implements Admin.
func (b *Batching) GroupOffsets(ctx context.Context, groups ...string) (map[string]GroupOffsets, error) {
	return b.admin().GroupOffsets(ctx, groups...)
}

// Ping implements Admin.
func (b *Batching) Ping(ctx context.Context) error { return b.admin().Ping(ctx) }

// ClusterID implements Admin, straight through.
func (b *Batching) ClusterID(ctx context.Context) (string, error) { return b.admin().ClusterID(ctx) }

// distinct returns the distinct non-empty names, in first-seen order.
func distinct(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}
