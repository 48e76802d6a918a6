package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Admin is the Kafka administration surface the controllers use. Every
// method is bounded by the factory's request timeout (or an earlier ctx
// deadline) and returns errors of type *Error, classifiable with
// IsAuthError, IsUnreachable, IsTLSError and errors.Is against the package
// sentinels. Implementations are safe for concurrent use.
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

	// ListOffsets returns the start (log start) and end (high watermark)
	// offsets of every partition of every existing requested topic,
	// sorted by partition. Missing topics are absent from the map. It
	// issues one Metadata request, then one ListOffsets request per
	// partition leader for the start offsets and one for the end offsets
	// (on a single broker cluster: exactly one of each).
	ListOffsets(ctx context.Context, topics ...string) (map[string][]PartitionOffsets, error)

	// DeleteRecordsBefore moves the log start offset of the given
	// partitions of topic to the given offsets, deleting every record
	// below. An offset of -1 means the current end offset. Offsets at or
	// below the current start are a no-op; offsets past the end fail with
	// OFFSET_OUT_OF_RANGE.
	DeleteRecordsBefore(ctx context.Context, topic string, before map[int32]int64) error

	// GroupLag returns, per requested group, the committed offset, end
	// offset and lag of every partition the group committed to; partitions
	// it never committed are omitted (kadm.Lag instead estimates them as
	// end - start for Empty groups). It issues one OffsetFetch per group
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
}

// TopicInfo describes one topic as returned by DescribeTopics.
type TopicInfo struct {
	// Name is the topic name.
	Name string
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

var _ Admin = (*kadmAdmin)(nil)

// kadmAdmin implements Admin over franz-go's kadm.
type kadmAdmin struct {
	cl      *kgo.Client
	adm     *kadm.Client
	timeout time.Duration
	clock   Clock
	servers []string

	secret string       // SASL password, scrubbed from error messages
	sasl   *saslTracker // nil without SASL

	inflight atomic.Int64
	lastUsed atomic.Int64 // clock.Now().UnixNano()
	closed   atomic.Bool
	once     sync.Once
}

func (a *kadmAdmin) touch() { a.lastUsed.Store(a.clock.Now().UnixNano()) }

func (a *kadmAdmin) lastUsedTime() time.Time { return time.Unix(0, a.lastUsed.Load()) }

func (a *kadmAdmin) close() {
	a.once.Do(func() {
		a.closed.Store(true)
		a.cl.Close()
	})
}

// errCallTimeout is the context cause when a call hits the request timeout.
var errCallTimeout = errors.New("request timeout")

// call is one bounded Admin method invocation.
type call struct {
	a     *kadmAdmin
	op    string
	start time.Time
}

// begin starts a call: it checks the admin is open, marks it in use and
// bounds ctx by the request timeout. The returned func must be deferred.
func (a *kadmAdmin) begin(ctx context.Context, op string) (context.Context, *call, func(), error) {
	c := &call{a: a, op: op, start: time.Now()}
	if a.closed.Load() {
		return nil, nil, nil, newError(op, KindClosed, ErrClosed, "")
	}
	a.inflight.Add(1)
	a.touch()
	ctx, cancel := context.WithTimeoutCause(ctx, a.timeout, errCallTimeout)
	return ctx, c, func() {
		cancel()
		a.touch()
		a.inflight.Add(-1)
	}, nil
}

// fail classifies err for this call. ctx is the call's context, used to
// report the deadline cause instead of a bare "context deadline exceeded".
func (c *call) fail(ctx context.Context, err error) error {
	return c.failOp(ctx, c.op, err)
}

func (c *call) failOp(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var already *Error
	if errors.As(err, &already) {
		return err
	}
	if c.a.closed.Load() && errors.Is(err, kgo.ErrClientClosed) {
		return newError(op, KindClosed, err, c.a.secret)
	}
	if ctx != nil && errors.Is(err, context.DeadlineExceeded) {
		if errors.Is(context.Cause(ctx), errCallTimeout) {
			err = fmt.Errorf("no answer from %s within the request timeout of %s: %w", strings.Join(c.a.servers, ","), c.a.timeout, err)
		} else {
			err = fmt.Errorf("no answer from %s before the context deadline: %w", strings.Join(c.a.servers, ","), err)
		}
	}
	kind := KindOther
	if c.a.sasl != nil && c.a.sasl.failedSince(c.start) && (isNetCause(err) || errors.Is(err, context.DeadlineExceeded)) {
		// Kafka before 1.0, and kfake, reject SASL credentials by closing
		// the connection instead of answering SASL_AUTHENTICATION_FAILED.
		err = fmt.Errorf("%w: the broker closed the connection during %s authentication of user %q (wrong password, unknown user or mechanism not enabled): %w",
			kerr.SaslAuthenticationFailed, c.a.sasl.mechanism, c.a.sasl.user, err)
		kind = KindAuth
	}
	return newError(op, kind, err, c.a.secret)
}

// await runs fn in its own goroutine and returns its result, or the call's
// timeout error as soon as ctx is done. franz-go does not watch the request
// context while it sets up a connection (ApiVersions, SASL), so this is what
// guarantees that a deadline bounds every call; the abandoned goroutine ends
// by itself within the client's own dial / request timeouts.
func await[T any](ctx context.Context, c *call, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := fn()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, c.fail(ctx, ctx.Err())
	}
}

// awaitErr is await for functions returning only an error.
// do runs fn as the operation op (begin, then awaitErr): refused once the admin is closed, counted
// in flight, bounded by the request timeout. fn gets the operation's context and call.
func (a *kadmAdmin) do(ctx context.Context, op string, fn func(context.Context, *call) error) error {
	ctx, c, done, err := a.begin(ctx, op)
	if err != nil {
		return err
	}
	defer done()
	return awaitErr(ctx, c, func() error { return fn(ctx, c) })
}

func awaitErr(ctx context.Context, c *call, fn func() error) error {
	_, err := await(ctx, c, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// saslTracker is a franz-go hook recording SASL exchanges that broke off.
type saslTracker struct {
	mechanism string
	user      string
	lastFail  atomic.Int64 // time.Now().UnixNano() of the last failed SASL read/write
}

var _ kgo.HookBrokerE2E = (*saslTracker)(nil)

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (t *saslTracker) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key != int16(kmsg.SASLAuthenticate) && key != int16(kmsg.SASLHandshake) {
		return
	}
	if e2e.Err() != nil {
		t.lastFail.Store(time.Now().UnixNano())
	}
}

func (t *saslTracker) failedSince(since time.Time) bool {
	last := t.lastFail.Load()
	return last != 0 && last >= since.UnixNano()
}

// describeNames renders a bounded list of names for error messages.
func describeNames(names []string) string {
	const maxShown = 5
	if len(names) <= maxShown {
		return fmt.Sprintf("%q", names)
	}
	return fmt.Sprintf("%q and %d more", names[:maxShown], len(names)-maxShown)
}

// uniqNames returns the distinct non-empty names, in first-seen order.
func uniqNames(names []string) []string {
	seen := make(map[string]struct{}, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n == "" {
			continue
		}
		if _, ok := seen[n]; ok {
			continue
		}
		seen[n] = struct{}{}
		out = append(out, n)
	}
	return out
}

// metadata issues one uncached Metadata request for topics (none if topics
// is empty). franz-go stores the answer in its metadata cache, so kadm
// helpers called right after (ListStartOffsets, ...) and request sharding
// reuse it instead of asking again.
func (a *kadmAdmin) metadata(ctx context.Context, topics []string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	return req.RequestWith(ctx, a.cl)
}

// topicMeta is what we keep of one topic's metadata.
type topicMeta struct {
	partitions []int32 // sorted
	rf         int16
}

// existingTopic reads fresh metadata of one topic; a missing topic is UNKNOWN_TOPIC_OR_PARTITION.
// Errors come failed through c.
func (a *kadmAdmin) existingTopic(ctx context.Context, c *call, name string) (topicMeta, error) {
	resp, err := a.metadata(ctx, []string{name})
	if err != nil {
		return topicMeta{}, c.fail(ctx, err)
	}
	metas, err := existingTopics(resp)
	if err != nil {
		return topicMeta{}, c.fail(ctx, err)
	}
	tm, ok := metas[name]
	if !ok {
		return topicMeta{}, c.fail(ctx, kerr.UnknownTopicOrPartition)
	}
	return tm, nil
}

// existingTopics splits a metadata response into existing topics and
// missing ones; any other topic error (authorization, leader not available)
// is returned.
func existingTopics(resp *kmsg.MetadataResponse) (map[string]topicMeta, error) {
	out := make(map[string]topicMeta, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				continue
			}
			return nil, fmt.Errorf("topic %q: %w", name, brokerErr(err, ""))
		}
		tm := topicMeta{partitions: make([]int32, 0, len(t.Partitions))}
		lowest := int32(-1)
		for _, p := range t.Partitions {
			tm.partitions = append(tm.partitions, p.Partition)
			if lowest == -1 || p.Partition < lowest {
				lowest = p.Partition
				tm.rf = int16(len(p.Replicas))
			}
		}
		slices.Sort(tm.partitions)
		out[name] = tm
	}
	return out, nil
}

// DescribeTopics implements Admin.
func (a *kadmAdmin) DescribeTopics(ctx context.Context, names ...string) (map[string]TopicInfo, error) {
	names = uniqNames(names)
	out := make(map[string]TopicInfo, len(names))
	if len(names) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "describe topics "+describeNames(names))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]TopicInfo, error) {
		resp, err := a.metadata(ctx, names)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		metas, err := existingTopics(resp)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		var existing []string
		for _, n := range names {
			tm, ok := metas[n]
			if !ok {
				out[n] = TopicInfo{Name: n}
				continue
			}
			existing = append(existing, n)
			out[n] = TopicInfo{
				Name:              n,
				Exists:            true,
				Partitions:        int32(len(tm.partitions)),
				ReplicationFactor: tm.rf,
				Configs:           map[string]string{},
			}
		}
		if len(existing) == 0 {
			return out, nil
		}

		rcs, err := a.adm.DescribeTopicConfigs(ctx, existing...)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		for _, rc := range rcs {
			info, ok := out[rc.Name]
			if !ok {
				continue
			}
			if rc.Err != nil {
				if errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
					// Deleted between the two requests.
					out[rc.Name] = TopicInfo{Name: rc.Name}
					continue
				}
				return nil, c.fail(ctx, fmt.Errorf("describe configs of topic %q: %w", rc.Name, brokerErr(rc.Err, rc.ErrMessage)))
			}
			for _, cfg := range rc.Configs {
				if cfg.Source != kmsg.ConfigSourceDynamicTopicConfig {
					continue
				}
				info.Configs[cfg.Key] = cfg.MaybeValue()
			}
		}
		return out, nil
	})
}

// CreateTopic implements Admin.
func (a *kadmAdmin) CreateTopic(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error {
	op := fmt.Sprintf("create topic %q", name)
	if err := validateTopicName(name); err != nil {
		return newError(op, KindOther, err, "")
	}
	if partitions == 0 || partitions < -1 {
		return newError(op, KindOther, fmt.Errorf("invalid partition count %d (want > 0, or -1 for the broker default)", partitions), "")
	}
	if rf == 0 || rf < -1 {
		return newError(op, KindOther, fmt.Errorf("invalid replication factor %d (want > 0, or -1 for the broker default)", rf), "")
	}
	return a.do(ctx, op, func(ctx context.Context, c *call) error {
		var cfgs map[string]*string
		if len(configs) > 0 {
			cfgs = make(map[string]*string, len(configs))
			for k, v := range configs {
				cfgs[k] = kmsg.StringPtr(v)
			}
		}
		resp, err := a.adm.CreateTopic(ctx, partitions, rf, cfgs, name)
		if err == nil {
			return nil
		}
		if resp.Err != nil {
			// A per-topic broker error: keep the broker's message.
			err = brokerErr(resp.Err, resp.ErrMessage)
		}
		return c.fail(ctx, err)
	})
}

// AlterTopicConfigs implements Admin.
func (a *kadmAdmin) AlterTopicConfigs(ctx context.Context, name string, set map[string]string) error {
	op := fmt.Sprintf("alter configs of topic %q", name)
	if err := validateTopicName(name); err != nil {
		return newError(op, KindOther, err, "")
	}
	if len(set) == 0 {
		return nil
	}
	return a.do(ctx, op, func(ctx context.Context, c *call) error {
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		alters := make([]kadm.AlterConfig, 0, len(set))
		for _, k := range keys {
			alters = append(alters, kadm.AlterConfig{Op: kadm.SetConfig, Name: k, Value: kmsg.StringPtr(set[k])})
		}
		resps, err := a.adm.AlterTopicConfigs(ctx, alters, name)
		if err != nil {
			return c.fail(ctx, err)
		}
		for _, r := range resps {
			if r.Err != nil {
				return c.fail(ctx, brokerErr(r.Err, r.ErrMessage))
			}
		}
		if len(resps) == 0 {
			return c.fail(ctx, errors.New("the broker returned no result for the topic"))
		}
		return nil
	})
}

// AddPartitions implements Admin.
func (a *kadmAdmin) AddPartitions(ctx context.Context, name string, total int32) error {
	op := fmt.Sprintf("grow topic %q to %d partitions", name, total)
	if err := validateTopicName(name); err != nil {
		return newError(op, KindOther, err, "")
	}
	if total <= 0 {
		return newError(op, KindOther, fmt.Errorf("invalid partition count %d", total), "")
	}
	return a.do(ctx, op, func(ctx context.Context, c *call) error {
		tm, err := a.existingTopic(ctx, c, name)
		if err != nil {
			return err
		}
		current := int32(len(tm.partitions))
		switch {
		case current == total:
			return nil
		case current > total:
			return c.fail(ctx, fmt.Errorf("%w: topic has %d partitions; Kafka cannot reduce the partition count", kerr.InvalidPartitions, current))
		}
		resps, err := a.adm.UpdatePartitions(ctx, int(total), name)
		if err != nil {
			return c.fail(ctx, err)
		}
		r, ok := resps[name]
		if !ok {
			return c.fail(ctx, errors.New("the broker returned no result for the topic"))
		}
		return c.fail(ctx, brokerErr(r.Err, r.ErrMessage))
	})
}

// DeleteTopic implements Admin.
func (a *kadmAdmin) DeleteTopic(ctx context.Context, name string) error {
	op := fmt.Sprintf("delete topic %q", name)
	if err := validateTopicName(name); err != nil {
		return newError(op, KindOther, err, "")
	}
	return a.do(ctx, op, func(ctx context.Context, c *call) error {
		resp, err := a.adm.DeleteTopic(ctx, name)
		if err == nil || errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil
		}
		if resp.Err != nil {
			err = brokerErr(resp.Err, resp.ErrMessage)
		}
		return c.fail(ctx, err)
	})
}

// ListOffsets implements Admin.
func (a *kadmAdmin) ListOffsets(ctx context.Context, topics ...string) (map[string][]PartitionOffsets, error) {
	topics = uniqNames(topics)
	if len(topics) == 0 {
		return map[string][]PartitionOffsets{}, nil
	}
	ctx, c, done, err := a.begin(ctx, "list offsets of topics "+describeNames(topics))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string][]PartitionOffsets, error) {
		return a.listOffsets(ctx, c, topics, true)
	})
}

// listOffsets lists the end (and, if withStart, the start) offsets of the
// existing topics among topics: one Metadata request, then the start and end
// ListOffsets rounds concurrently. Without withStart, Start is -1.
func (a *kadmAdmin) listOffsets(ctx context.Context, c *call, topics []string, withStart bool) (map[string][]PartitionOffsets, error) {
	resp, err := a.metadata(ctx, topics)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	metas, err := existingTopics(resp)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	out := make(map[string][]PartitionOffsets, len(metas))
	if len(metas) == 0 {
		return out, nil
	}
	existing := make([]string, 0, len(metas))
	for _, t := range topics {
		if _, ok := metas[t]; ok {
			existing = append(existing, t)
		}
	}

	var (
		wg               sync.WaitGroup
		starts, ends     kadm.ListedOffsets
		startErr, endErr error
	)
	if withStart {
		wg.Add(1)
		go func() {
			defer wg.Done()
			starts, startErr = a.adm.ListStartOffsets(ctx, existing...)
		}()
	}
	ends, endErr = a.adm.ListEndOffsets(ctx, existing...)
	wg.Wait()
	if err := errors.Join(startErr, endErr); err != nil {
		return nil, c.fail(ctx, err)
	}

	lookup := func(l kadm.ListedOffsets, kind, t string, p int32) (int64, error) {
		lo, ok := l.Lookup(t, p)
		if !ok {
			return 0, fmt.Errorf("topic %q partition %d: no %s offset in the ListOffsets response", t, p, kind)
		}
		if lo.Err != nil {
			return 0, fmt.Errorf("topic %q partition %d %s offset: %w", t, p, kind, lo.Err)
		}
		return lo.Offset, nil
	}
	for _, t := range existing {
		tm := metas[t]
		pos := make([]PartitionOffsets, 0, len(tm.partitions))
		for _, p := range tm.partitions {
			po := PartitionOffsets{Partition: p, Start: -1}
			if withStart {
				if po.Start, err = lookup(starts, "start", t, p); err != nil {
					return nil, c.fail(ctx, err)
				}
			}
			if po.End, err = lookup(ends, "end", t, p); err != nil {
				return nil, c.fail(ctx, err)
			}
			pos = append(pos, po)
		}
		out[t] = pos
	}
	return out, nil
}

// DeleteRecordsBefore implements Admin.
func (a *kadmAdmin) DeleteRecordsBefore(ctx context.Context, topic string, before map[int32]int64) error {
	op := fmt.Sprintf("delete records of topic %q", topic)
	if err := validateTopicName(topic); err != nil {
		return newError(op, KindOther, err, "")
	}
	if len(before) == 0 {
		return nil
	}
	return a.do(ctx, op, func(ctx context.Context, c *call) error {
		// Fresh metadata: existence check, and current leaders for sharding.
		if _, err := a.existingTopic(ctx, c, topic); err != nil {
			return err
		}

		os := make(kadm.Offsets)
		for p, off := range before {
			if off < -1 {
				return c.fail(ctx, fmt.Errorf("partition %d: invalid offset %d", p, off))
			}
			os.Add(kadm.Offset{Topic: topic, Partition: p, At: off, LeaderEpoch: -1})
		}
		resps, err := a.adm.DeleteRecords(ctx, os)
		if err != nil {
			return c.fail(ctx, err)
		}
		var outOfRange []int32
		for _, p := range sortedPartitions(before) {
			r, ok := resps.Lookup(topic, p)
			switch {
			case !ok:
				return c.fail(ctx, fmt.Errorf("partition %d: no result in the DeleteRecords response", p))
			case errors.Is(r.Err, kerr.OffsetOutOfRange):
				outOfRange = append(outOfRange, p)
			case r.Err != nil:
				return c.fail(ctx, fmt.Errorf("partition %d: %w", p, r.Err))
			}
		}
		if len(outOfRange) == 0 {
			return nil
		}
		// Apache Kafka treats an offset below the log start as a no-op
		// success; some implementations (kfake) answer OFFSET_OUT_OF_RANGE.
		// Forgive those, so trimming is idempotent everywhere.
		starts, err := a.adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return c.fail(ctx, err)
		}
		for _, p := range outOfRange {
			lo, ok := starts.Lookup(topic, p)
			if ok && lo.Err == nil && before[p] >= 0 && before[p] <= lo.Offset {
				continue
			}
			return c.fail(ctx, fmt.Errorf("partition %d offset %d: %w", p, before[p], kerr.OffsetOutOfRange))
		}
		return nil
	})
}

func sortedPartitions[V any](m map[int32]V) []int32 {
	ps := make([]int32, 0, len(m))
	for p := range m {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	return ps
}

// GroupLag implements Admin: the committed offsets (GroupOffsets' one OffsetFetch round) and one
// end-offset listing for every topic any of the groups committed to.
func (a *kadmAdmin) GroupLag(ctx context.Context, groups ...string) (map[string]GroupLagInfo, error) {
	groups = uniqNames(groups)
	out := make(map[string]GroupLagInfo, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "group lag of "+describeNames(groups))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]GroupLagInfo, error) {
		committed, firstErr := a.fetchGroupOffsets(ctx, c, groups)
		topicSet := make(map[string]struct{})
		for _, g := range committed {
			for t := range g.Topics {
				topicSet[t] = struct{}{}
			}
		}
		var offsets map[string][]PartitionOffsets
		if len(topicSet) > 0 {
			topics := make([]string, 0, len(topicSet))
			for t := range topicSet {
				topics = append(topics, t)
			}
			sort.Strings(topics)
			var err error
			if offsets, err = a.listOffsets(ctx, c, topics, false); err != nil {
				return nil, err
			}
		}
		for _, g := range groups {
			co := committed[g]
			info := GroupLagInfo{Group: g, Topics: map[string][]PartitionLag{}, Err: co.Err}
			for t, ps := range co.Topics {
				ends := make(map[int32]int64, len(offsets[t]))
				for _, po := range offsets[t] {
					ends[po.Partition] = po.End
				}
				lags := make([]PartitionLag, 0, len(ps))
				for _, p := range sortedPartitions(ps) {
					pl := PartitionLag{Partition: p, Committed: ps[p], End: -1, Lag: -1}
					if end, ok := ends[p]; ok {
						pl.End = end
						pl.Lag = max(end-ps[p], 0)
					}
					lags = append(lags, pl)
				}
				info.Topics[t] = lags
			}
			out[g] = info
		}
		return out, firstErr
	})
}

// Ping implements Admin.
func (a *kadmAdmin) Ping(ctx context.Context) error {
	return a.do(ctx, "ping "+strings.Join(a.servers, ","), func(ctx context.Context, c *call) error {
		if _, err := a.metadata(ctx, nil); err != nil {
			return c.fail(ctx, err)
		}
		return nil
	})
}

// validateTopicName applies Kafka's topic name rules so that obviously bad
// names fail before a round trip.
func validateTopicName(name string) error {
	switch {
	case name == "":
		return errors.New("topic name is empty")
	case name == "." || name == "..":
		return fmt.Errorf("topic name %q is not allowed", name)
	case len(name) > 249:
		return fmt.Errorf("topic name is %d characters long (max 249)", len(name))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("topic name %q contains %q (allowed: ASCII letters, digits, '.', '_', '-')", name, r)
		}
	}
	return nil
}
