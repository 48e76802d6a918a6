package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

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

// GroupOffsets implements Admin. It is GroupLag without the end offsets: callers that list the
// offsets of the same topics anyway (the operator's status refresh lists the start and end offsets of
// every topic of a connection in one round) compute the lag themselves and save a ListOffsets round.
func (a *kadmAdmin) GroupOffsets(ctx context.Context, groups ...string) (map[string]GroupOffsets, error) {
	groups = uniqNames(groups)
	out := make(map[string]GroupOffsets, len(groups))
	if len(groups) == 0 {
		return out, nil
	}
	ctx, c, done, err := a.begin(ctx, "offsets of groups "+describeNames(groups))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string]GroupOffsets, error) {
		return a.fetchGroupOffsets(ctx, c, groups)
	})
}

// fetchGroupOffsets fetches the committed offsets of groups in one OffsetFetch round. A group whose
// offsets could not all be fetched has Err set and no topics; the first such error is returned too.
func (a *kadmAdmin) fetchGroupOffsets(ctx context.Context, c *call, groups []string) (map[string]GroupOffsets, error) {
	out := make(map[string]GroupOffsets, len(groups))
	fetched := a.adm.FetchManyOffsets(ctx, groups...)
	var firstErr error
	for _, g := range groups {
		info := GroupOffsets{Group: g, Topics: map[string]map[int32]int64{}}
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
