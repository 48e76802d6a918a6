package franz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// OffsetsAfter implements Admin: one ListOffsets request carrying every partition with its topic's
// own timestamp, which franz-go splits by partition leader (kadm's ListOffsetsAfterMilli takes one
// timestamp for all topics, which would cost a round per distinct time).
func (a *kadmAdmin) OffsetsAfter(ctx context.Context, after map[string]time.Time) (map[string]map[int32]kafka.TimedOffset, error) {
	topics := make([]string, 0, len(after))
	for t := range after {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	if len(topics) == 0 {
		return map[string]map[int32]kafka.TimedOffset{}, nil
	}
	ctx, c, done, err := a.begin(ctx, "list offsets by time of topics "+describeNames(topics))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]map[int32]kafka.TimedOffset, error) {
		resp, err := a.metadata(ctx, topics)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		metas, err := existingTopics(resp)
		if err != nil {
			return nil, c.fail(ctx, err)
		}
		out := make(map[string]map[int32]kafka.TimedOffset, len(metas))
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		for _, t := range topics {
			m, ok := metas[t]
			if !ok {
				continue
			}
			out[t] = make(map[int32]kafka.TimedOffset, len(m.partitions))
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = t
			for _, p := range m.partitions {
				rp := kmsg.NewListOffsetsRequestTopicPartition()
				rp.Partition, rp.CurrentLeaderEpoch, rp.Timestamp = p, -1, after[t].UnixMilli()
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
		}
		if len(req.Topics) == 0 {
			return out, nil
		}
		for _, shard := range a.cl.RequestSharded(ctx, req) {
			if shard.Err != nil {
				return nil, c.fail(ctx, shard.Err)
			}
			lr, ok := shard.Resp.(*kmsg.ListOffsetsResponse)
			if !ok {
				return nil, c.fail(ctx, fmt.Errorf("unexpected response %T to ListOffsets", shard.Resp))
			}
			for _, rt := range lr.Topics {
				for _, rp := range rt.Partitions {
					if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
						return nil, c.fail(ctx, fmt.Errorf("topic %q partition %d offset by time: %w", rt.Topic, rp.Partition, err))
					}
					if ps, ok := out[rt.Topic]; ok {
						// A broker answers -1 with timestamp -1 when no record is that recent.
						ts := rp.Timestamp
						if rp.Offset < 0 {
							ts = -1
						}
						ps[rp.Partition] = kafka.TimedOffset{Offset: rp.Offset, Timestamp: ts}
					}
				}
			}
		}
		for t, ps := range out {
			for _, p := range metas[t].partitions {
				if _, ok := ps[p]; !ok {
					return nil, c.fail(ctx, errors.New("topic "+t+": a partition missing from the ListOffsets response"))
				}
			}
		}
		return out, nil
	})
}
