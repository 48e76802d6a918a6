package kafkastats

import (
	"context"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// DueOffsets batches, per connection, where the due records of every retry tier end: for each tier
// partition, the offset of the first record whose Kafka timestamp is younger than the tier's
// longest delay (Admin.OffsetsAfter at the round's time minus that delay). A retry record is
// written when its delay starts, so its timestamp plus the tier's longest delay bounds its due time
// (retryops.due) from above: every record below that offset is due. One ListOffsets round per
// connection serves every pipeline, each tier at its own time, whatever the number of tiers.
//
// Every record below that offset is older than the time asked (Kafka's time index), so due: the
// figure never counts a waiting record. It counts a due record late by up to the width of the tier's
// jitter window (its due time is somewhere between its timestamp plus the shortest and the longest
// delay), exactly without jitter. Tier records are not in due order (jitter, several retries sharing
// a tier, several consumers writing one partition), so a bounded read from the committed offset
// would not be exact either and would cost a fetch per partition. A Retry-After honoured beyond the
// tier's window is the one case counted early: from the window's end.
type DueOffsets struct {
	reads *batchedReads[map[int32]kafka.TimedOffset]
}

// NewDueOffsets returns an empty DueOffsets reading the time from clk.
func NewDueOffsets(clk clock.PassiveClock) *DueOffsets {
	return &DueOffsets{reads: newBatchedReads(clk, func(ctx context.Context, admin kafka.Admin, keys []string) (map[string]map[int32]kafka.TimedOffset, error) {
		now := clk.Now()
		out := make(map[string]map[int32]kafka.TimedOffset, len(keys))
		// A topic read under two delays (a tier renamed between policies, read by two pipelines)
		// needs a request per delay; otherwise one serves all.
		for len(keys) > 0 {
			after, byTopic, rest := map[string]time.Time{}, map[string]string{}, []string(nil)
			for _, k := range keys {
				topic, latest := splitDueKey(k)
				if _, taken := after[topic]; taken {
					rest = append(rest, k)
					continue
				}
				// Due means timestamp+latest <= now: ask for the first record a millisecond
				// (Kafka's unit) younger than that.
				after[topic], byTopic[topic] = now.Add(-latest).Truncate(time.Millisecond).Add(time.Millisecond), k
			}
			got, err := admin.OffsetsAfter(ctx, after)
			if err != nil {
				return nil, err
			}
			for topic, k := range byTopic {
				if ps, ok := got[topic]; ok {
					out[k] = ps
				}
			}
			keys = rest
		}
		return out, nil
	})}
}

// Get returns, for each tier of tiers (topic to the longest delay of its records), the offset of
// each partition's first record not surely due as of the time returned, with its timestamp, or -1
// when all are; read
// for member over the connection connKey, no older than maxAge. A topic that does not exist is
// absent.
func (d *DueOffsets) Get(ctx context.Context, admin kafka.Admin, connKey, member string, tiers map[string]time.Duration, maxAge time.Duration) (map[string]map[int32]kafka.TimedOffset, time.Time, error) {
	keys := make([]string, 0, len(tiers))
	for topic, latest := range tiers {
		keys = append(keys, dueKey(topic, latest))
	}
	got, taken, err := d.reads.Get(ctx, admin, connKey, member, keys, maxAge)
	if err != nil {
		return nil, time.Time{}, err
	}
	out := make(map[string]map[int32]kafka.TimedOffset, len(got))
	for k, ps := range got {
		if ps != nil {
			topic, _ := splitDueKey(k)
			out[topic] = ps
		}
	}
	return out, taken, nil
}

// Forget removes member from every snapshot group; a group left without members is dropped.
func (d *DueOffsets) Forget(member string) { d.reads.Forget(member) }

// dueKey names a tier read at a delay; '/' never occurs in a topic name.
func dueKey(topic string, latest time.Duration) string {
	return topic + "/" + strconv.FormatInt(int64(latest), 10)
}

func splitDueKey(k string) (string, time.Duration) {
	i := strings.LastIndexByte(k, '/')
	n, _ := strconv.ParseInt(k[i+1:], 10, 64)
	return k[:i], time.Duration(n)
}

// DueLag is the number of records of a retry tier a consumer group has to read that are due: on
// each partition, from where GroupLag starts to the first record not yet due (dueEnd, -1 for the
// end), within the partition's offsets. A partition dueEnd does not know (the topic grew since)
// counts 0.
func DueLag(offsets []kafka.PartitionOffsets, committed map[int32]int64, dueEnd map[int32]kafka.TimedOffset) int64 {
	var lag int64
	for _, o := range offsets {
		at, ok := dueEnd[o.Partition]
		if !ok {
			continue
		}
		end := at.Offset
		if end < 0 || end > o.End {
			end = o.End
		}
		from := o.Start
		if c, ok := committed[o.Partition]; ok && c > from {
			from = c
		}
		if end > from {
			lag += end - from
		}
	}
	return lag
}

// EarliestWaiting is the earliest time a record of a retry tier that the group has yet to read
// and that is not yet due can come due: the timestamp of the first record not surely due (dueEnd),
// plus the tier's shortest delay (earliest). A retry record is written when its delay starts and
// a partition's timestamps grow with its offsets, so no waiting record of the partition can come
// due before. ok is false when no record waits: every partition's records are due or read.
//
// offsets and dueEnd come from separate batched rounds, up to a refresh apart: a record dueEnd found
// past the end offsets knows, or on a partition they do not know yet, waits all the same.
func EarliestWaiting(offsets []kafka.PartitionOffsets, committed map[int32]int64, dueEnd map[int32]kafka.TimedOffset, earliest time.Duration) (at time.Time, ok bool) {
	ends := make(map[int32]int64, len(offsets))
	for _, o := range offsets {
		ends[o.Partition] = o.End
	}
	for p, d := range dueEnd {
		if d.Offset < 0 || d.Timestamp < 0 {
			continue
		}
		if c, read := committed[p]; read && c >= max(ends[p], d.Offset+1) {
			continue
		}
		t := time.UnixMilli(d.Timestamp).Add(earliest)
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// Members is the number of resources whose reads are batched.
func (d *DueOffsets) Members() int { return d.reads.members() }
