package franz

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/retryops/retry-operator/internal/kafka"
)

// GroupLag implements Admin: the committed offsets (GroupOffsets' one OffsetFetch round) and one
// end-offset listing for every topic any of the groups committed to.
func (a *kadmAdmin) GroupLag(ctx context.Context, groups ...string) (map[string]kafka.GroupLagInfo, error) {
	groups = uniqNames(groups)
	out := make(map[string]kafka.GroupLagInfo, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "group lag of "+describeNames(groups))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]kafka.GroupLagInfo, error) {
		committed, firstErr := a.fetchGroupOffsets(ctx, c, groups)
		topicSet := make(map[string]struct{})
		for _, g := range committed {
			for t := range g.Topics {
				topicSet[t] = struct{}{}
			}
		}
		var offsets map[string][]kafka.PartitionOffsets
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
			info := kafka.GroupLagInfo{Group: g, Topics: map[string][]kafka.PartitionLag{}, Err: co.Err}
			for t, ps := range co.Topics {
				ends := make(map[int32]int64, len(offsets[t]))
				for _, po := range offsets[t] {
					ends[po.Partition] = po.End
				}
				lags := make([]kafka.PartitionLag, 0, len(ps))
				for _, p := range sortedPartitions(ps) {
					pl := kafka.PartitionLag{Partition: p, Committed: ps[p], End: -1, Lag: -1}
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

// GroupOffsets implements Admin. It is GroupLag without the end offsets: callers that list the
// offsets of the same topics anyway (the operator's status refresh lists the start and end offsets of
// every topic of a connection in one round) compute the lag themselves and save a ListOffsets round.
func (a *kadmAdmin) GroupOffsets(ctx context.Context, groups ...string) (map[string]kafka.GroupOffsets, error) {
	groups = uniqNames(groups)
	out := make(map[string]kafka.GroupOffsets, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "offsets of groups "+describeNames(groups))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]kafka.GroupOffsets, error) {
		return a.fetchGroupOffsets(ctx, c, groups)
	})
}

// fetchGroupOffsets fetches the committed offsets of groups in one OffsetFetch round. A group whose
// offsets could not all be fetched has Err set and no topics; the first such error is returned too.
func (a *kadmAdmin) fetchGroupOffsets(ctx context.Context, c *call, groups []string) (map[string]kafka.GroupOffsets, error) {
	out := make(map[string]kafka.GroupOffsets, len(groups))
	fetched := a.adm.FetchManyOffsets(ctx, groups...)
	var firstErr error
	for _, g := range groups {
		info := kafka.GroupOffsets{Group: g, Topics: map[string]map[int32]int64{}}
		r, ok := fetched[g]
		switch {
		case !ok:
			info.Err = c.failOp(ctx, fmt.Sprintf("fetch offsets of group %q", g), errors.New("no result in the OffsetFetch response"))
		case errors.Is(r.Err, kerr.GroupIDNotFound):
			// A group with no state: nothing committed (see GroupLag).
		case r.Err != nil:
			info.Err = c.failOp(ctx, fmt.Sprintf("fetch offsets of group %q", g), r.Err)
		default:
			for t, ps := range r.Fetched {
				for p, o := range ps {
					if o.Err != nil {
						if info.Err == nil {
							info.Err = c.failOp(ctx, fmt.Sprintf("fetch offsets of group %q topic %q partition %d", g, t, p), o.Err)
						}
						continue
					}
					if o.At < 0 {
						continue
					}
					if info.Topics[t] == nil {
						info.Topics[t] = map[int32]int64{}
					}
					info.Topics[t][p] = o.At
				}
			}
		}
		if info.Err != nil {
			info.Topics = map[string]map[int32]int64{}
			if firstErr == nil {
				firstErr = info.Err
			}
		}
		out[g] = info
	}
	return out, firstErr
}
