package franz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// metadata issues one uncached Metadata request for topics (none if topics
// is empty). franz-go stores the answer in its metadata cache, so kadm
// helpers called right after (ListStartOffsets, ...) and request sharding
// reuse it instead of asking again. The cluster ID of the answer is kept
// for ClusterID.
func (a *kadmAdmin) metadata(ctx context.Context, topics []string) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, a.cl)
	if err == nil && resp.ClusterID != nil && *resp.ClusterID != "" && len(*resp.ClusterID) <= kafka.MaxClusterIDBytes {
		id := *resp.ClusterID
		a.clusterID.Store(&id)
	}
	return resp, err
}

// topicMeta is what we keep of one topic's metadata.
type topicMeta struct {
	partitions []int32 // sorted
	rf         int16
	id         string // "" when the broker gave none
}

// topicID formats a Metadata topic ID as a UUID; the zero ID (a broker before Kafka 2.8, or an
// older Metadata version) is "".
func topicID(id [16]byte) string {
	if id == ([16]byte{}) {
		return ""
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
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
		out[name] = metaOf(t)
	}
	return out, nil
}

// metaOf is what we keep of one topic of a Metadata answer.
func metaOf(t kmsg.MetadataResponseTopic) topicMeta {
	tm := topicMeta{partitions: make([]int32, 0, len(t.Partitions)), id: topicID(t.TopicID)}
	lowest := int32(-1)
	for _, p := range t.Partitions {
		tm.partitions = append(tm.partitions, p.Partition)
		if lowest == -1 || p.Partition < lowest {
			lowest = p.Partition
			tm.rf = int16(len(p.Replicas))
		}
	}
	slices.Sort(tm.partitions)
	return tm
}

// DescribeTopics implements Admin.
func (a *kadmAdmin) DescribeTopics(ctx context.Context, names ...string) (map[string]kafka.TopicInfo, error) {
	names = uniqNames(names)
	out := make(map[string]kafka.TopicInfo, len(names))
	if len(names) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "describe topics "+describeNames(names))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]kafka.TopicInfo, error) {
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
				out[n] = kafka.TopicInfo{Name: n}
				continue
			}
			existing = append(existing, n)
			out[n] = kafka.TopicInfo{
				Name:              n,
				ID:                tm.id,
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
					out[rc.Name] = kafka.TopicInfo{Name: rc.Name}
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

// TopicIDs implements Admin.
func (a *kadmAdmin) TopicIDs(ctx context.Context, names ...string) (map[string]string, error) {
	names = uniqNames(names)
	out := make(map[string]string, len(names))
	if len(names) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "read the IDs of topics "+describeNames(names))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]string, error) {
		resp, err := a.metadata(ctx, names)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		metas, err := existingTopics(resp)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		for _, n := range names {
			if tm, ok := metas[n]; ok {
				out[n] = tm.id
			}
		}
		return out, nil
	})
}

// CreateTopic implements Admin.
func (a *kadmAdmin) CreateTopic(ctx context.Context, name string, partitions int32, rf int16, configs map[string]string) error {
	op := fmt.Sprintf("create topic %q", name)
	if err := checkCreate(name, partitions, rf); err != nil {
		return newError(op, kafka.KindOther, err, "")
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

// checkCreate refuses what no broker would create, before a round trip.
func checkCreate(name string, partitions int32, rf int16) error {
	if err := validateTopicName(name); err != nil {
		return err
	}
	if partitions == 0 || partitions < -1 {
		return fmt.Errorf("invalid partition count %d (want > 0, or -1 for the broker default)", partitions)
	}
	if rf == 0 || rf < -1 {
		return fmt.Errorf("invalid replication factor %d (want > 0, or -1 for the broker default)", rf)
	}
	return nil
}

// AlterTopicConfigs implements Admin.
func (a *kadmAdmin) AlterTopicConfigs(ctx context.Context, name string, set map[string]string) error {
	op := fmt.Sprintf("alter configs of topic %q", name)
	if err := validateTopicName(name); err != nil {
		return newError(op, kafka.KindOther, err, "")
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
		return newError(op, kafka.KindOther, err, "")
	}
	if total <= 0 {
		return newError(op, kafka.KindOther, fmt.Errorf("invalid partition count %d", total), "")
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
		return newError(op, kafka.KindOther, err, "")
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

// Ping implements Admin.
func (a *kadmAdmin) Ping(ctx context.Context) error {
	return a.do(ctx, "ping "+strings.Join(a.servers, ","), func(ctx context.Context, c *call) error {
		if _, err := a.metadata(ctx, nil); err != nil {
			return c.fail(ctx, err)
		}
		return nil
	})
}

// ClusterID implements Admin: the ID of the latest Metadata answer, else one Metadata request.
func (a *kadmAdmin) ClusterID(ctx context.Context) (string, error) {
	if id := a.clusterID.Load(); id != nil {
		return *id, nil
	}
	op := "cluster id " + strings.Join(a.servers, ",")
	err := a.do(ctx, op, func(ctx context.Context, c *call) error {
		if _, err := a.metadata(ctx, nil); err != nil {
			return c.fail(ctx, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if id := a.clusterID.Load(); id != nil {
		return *id, nil
	}
	return "", newError(op, kafka.KindOther, errNoClusterID, "")
}

// errNoClusterID is the error of brokers whose Metadata answers carry no cluster ID, or one over
// kafka.MaxClusterIDBytes.
var errNoClusterID = errors.New("the brokers' Metadata answer carries no cluster ID (Kafka before 0.10.1), or one longer than 256 bytes")
