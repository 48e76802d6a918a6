package kafkafake

import (
	"context"
	"maps"
	"time"

	"github.com/retryops/retry-operator/internal/kafka"
)

// OffsetsAfter names kafka.Admin.OffsetsAfter.
const OffsetsAfter = "OffsetsAfter"

// OffsetsAfter implements kafka.Admin from the records ProduceRecords wrote; an offset with no such
// record (a topic's end moved by SetOffsets) counts as older than any time.
func (f *Fake) OffsetsAfter(ctx context.Context, after map[string]time.Time) (map[string]map[int32]kafka.TimedOffset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.begin(ctx, OffsetsAfter, maps.Clone(after)); err != nil {
		return nil, err
	}
	out := make(map[string]map[int32]kafka.TimedOffset, len(after))
	for name, at := range after {
		t, ok := f.topics[name]
		if !ok {
			continue
		}
		ps := make(map[int32]kafka.TimedOffset, len(t.end))
		for p := range t.end {
			ps[int32(p)] = kafka.TimedOffset{Offset: -1, Timestamp: -1}
			for off := t.start[p]; off < t.end[p]; off++ {
				if r, ok := t.records[int32(p)][off]; ok && !r.Timestamp.Before(at) {
					ps[int32(p)] = kafka.TimedOffset{Offset: off, Timestamp: r.Timestamp.UnixMilli()}
					break
				}
			}
		}
		out[name] = ps
	}
	return out, nil
}
