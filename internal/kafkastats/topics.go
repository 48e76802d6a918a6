package kafkastats

import (
	"context"
	"maps"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Topics batches the describes (partitions, replication, configs) of the topics of every resource
// on one connection, as Offsets does their offsets: one DescribeTopics of all their topics (one
// Metadata and one DescribeConfigs request) per connection per refresh interval, which the
// resources that resync within that interval read instead of asking Kafka again. A resource whose
// topics are settled reads the snapshot (so out-of-band drift shows within one interval); one that
// is changing reads its topics fresh (ReadFresh) and what it changes goes back in (Set), so that
// the readers after it see the change.
//
// A topic that does not exist is described with Exists false.
//
// A member leaves by itself once it stops describing (batchedReads' lease), its marks with it.
type Topics struct {
	reads *batchedReads[kafka.TopicInfo]
}

// NewTopics returns an empty Topics reading the time from clk.
func NewTopics(clk clock.PassiveClock) *Topics {
	return &Topics{reads: newBatchedReads(clk, func(ctx context.Context, admin kafka.Admin, names []string) (map[string]kafka.TopicInfo, error) {
		got, err := admin.DescribeTopics(ctx, names...)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if _, ok := got[n]; !ok {
				got[n] = kafka.TopicInfo{Name: n}
			}
		}
		return got, nil
	})}
}

// Describe returns the descriptions of names for member: from the snapshot (no older than maxAge)
// when settled says member's topics are as its spec asks and its last reconcile did not fail
// (Unsettle), fresh (ReadFresh) otherwise.
func (t *Topics) Describe(ctx context.Context, admin kafka.Admin, connKey, member string, names []string, maxAge time.Duration, settled bool) (map[string]kafka.TopicInfo, error) {
	if settled && !t.reads.marked(member) {
		return t.Get(ctx, admin, connKey, member, names, maxAge)
	}
	got, err := t.ReadFresh(ctx, admin, connKey, member, names)
	if err == nil {
		t.reads.mark(member, false)
	}
	return got, err
}

// Unsettle makes member's next Describe fresh: its reconcile failed, and what it read may be
// what failed it.
func (t *Topics) Unsettle(member string) { t.reads.mark(member, true) }

// Get returns the descriptions of names, read for member over the connection connKey (admin is its
// client), no older than maxAge.
func (t *Topics) Get(ctx context.Context, admin kafka.Admin, connKey, member string, names []string, maxAge time.Duration) (map[string]kafka.TopicInfo, error) {
	got, _, err := t.reads.Get(ctx, admin, connKey, member, names, maxAge)
	return cloneInfos(got), err
}

// ReadFresh describes names for member now (through admin, so still batched with the describes of
// the same moment) and puts what it read in the snapshot of connKey.
func (t *Topics) ReadFresh(ctx context.Context, admin kafka.Admin, connKey, member string, names []string) (map[string]kafka.TopicInfo, error) {
	got, err := t.reads.ReadFresh(ctx, admin, connKey, member, names)
	return cloneInfos(got), err
}

// Set replaces the description of info.Name in the snapshot of connKey, after this operator changed
// the topic (created it, altered its configs, added partitions).
func (t *Topics) Set(connKey string, info kafka.TopicInfo) {
	info.Configs = maps.Clone(info.Configs)
	t.reads.Set(connKey, info.Name, info)
}

// Drop removes topic from the snapshot of connKey, so that its next reader describes it alone:
// after this operator created it (its ID and replication factor are the brokers' to tell).
func (t *Topics) Drop(connKey, topic string) {
	t.reads.Drop(connKey, topic)
}

// cloneInfos copies the configs, which the snapshot shares with every reader.
func cloneInfos(in map[string]kafka.TopicInfo) map[string]kafka.TopicInfo {
	if in == nil {
		return nil
	}
	out := make(map[string]kafka.TopicInfo, len(in))
	for k, v := range in {
		v.Configs = maps.Clone(v.Configs)
		out[k] = v
	}
	return out
}

// Members is the number of resources whose reads are batched.
func (t *Topics) Members() int { return t.reads.members() }
