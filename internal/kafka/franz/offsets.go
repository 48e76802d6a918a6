package franz

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/retryops/retry-operator/internal/kafka"
)

// ListOffsets implements Admin.
func (a *kadmAdmin) ListOffsets(ctx context.Context, topics ...string) (map[string][]kafka.PartitionOffsets, error) {
	topics = uniqNames(topics)
	if len(topics) == 0 {
		return map[string][]kafka.PartitionOffsets{}, nil
	}
	ctx, c, done, err := a.begin(ctx, "list offsets of topics "+describeNames(topics))
	if err != nil {
		return nil, err
	}
	defer done()
	return await(ctx, c, func() (map[string][]kafka.PartitionOffsets, error) {
		return a.listOffsets(ctx, c, topics, true)
	})
}

// listOffsets lists the end (and, if withStart, the start) offsets of the
// existing topics among topics: one Metadata request, then the start and end
// ListOffsets rounds concurrently. Without withStart, Start is -1.
func (a *kadmAdmin) listOffsets(ctx context.Context, c *call, topics []string, withStart bool) (map[string][]kafka.PartitionOffsets, error) {
	resp, err := a.metadata(ctx, topics)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	metas, err := existingTopics(resp)
	if err != nil {
		return nil, c.fail(ctx, err)
	}
	out := make(map[string][]kafka.PartitionOffsets, len(metas))
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
		pos := make([]kafka.PartitionOffsets, 0, len(tm.partitions))
		for _, p := range tm.partitions {
			po := kafka.PartitionOffsets{Partition: p, Start: -1}
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
		return newError(op, kafka.KindOther, err, "")
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
