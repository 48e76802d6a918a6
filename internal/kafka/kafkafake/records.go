package kafkafake

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Method names of the factory side of the Fake.
const (
	// ProduceRecords names kafka.Producer.ProduceRecords.
	ProduceRecords = "ProduceRecords"
	// Scan names kafka.Scanner.Scan.
	Scan = "Scan"
)

var _ kafka.ClientFactory = (*Fake)(nil)

// Admin implements kafka.AdminFactory: every connection reaches the same Fake, through an Admin
// whose ClusterID is the connection's (SetClusterID). It fails, as the real factory does, when conn
// is invalid.
func (f *Fake) Admin(ctx context.Context, conn kafka.Connection) (kafka.Admin, error) {
	if err := conn.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return connAdmin{Fake: f, servers: serversKey(conn.BootstrapServers)}, nil
}

// Forget implements kafka.AdminFactory; the Fake caches nothing.
func (f *Fake) Forget(string) bool { return false }

// ProduceRecords implements kafka.Producer: each record is appended at its partition's end offset (a
// partition of -1 is chosen by an FNV hash of the key) and kept for Scan and Records. The call is
// recorded with the topic and a copy of the records; an injected error fails it before anything is
// written. A record for a partition the topic does not have fails alone, with the others written.
func (f *Fake) ProduceRecords(ctx context.Context, conn kafka.Connection, topicName string, records []kafka.ProduceRecord) ([]kafka.ProduceResult, error) {
	if err := conn.Validate(); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := make([]kafka.ProduceRecord, len(records))
	for i, r := range records {
		kept[i] = cloneProduceRecord(r)
	}
	if err := f.begin(ctx, ProduceRecords, topicName, kept); err != nil {
		return nil, err
	}
	t, ok := f.topics[topicName]
	if !ok {
		return nil, notFound("produce to topic", topicName)
	}
	results := make([]kafka.ProduceResult, len(records))
	var first error
	for i, r := range kept {
		p := r.Partition
		if p < 0 {
			h := fnv.New32a()
			_, _ = h.Write(r.Key)
			p = int32(h.Sum32() % uint32(len(t.end)))
		}
		if int(p) >= len(t.end) {
			results[i].Err = brokerError(fmt.Sprintf("produce to topic %q partition %d", topicName, p), kafka.KindTopicNotFound, codeUnknownTopic, true, "")
			if first == nil {
				first = results[i].Err
			}
			continue
		}
		if t.records == nil {
			t.records = map[int32]map[int64]kafka.Record{}
		}
		if t.records[p] == nil {
			t.records[p] = map[int64]kafka.Record{}
		}
		off := t.end[p]
		ts := r.Timestamp
		if ts.IsZero() {
			ts = f.now()
		}
		t.records[p][off] = kafka.Record{Topic: topicName, Partition: p, Offset: off, Timestamp: ts, Key: r.Key, Value: r.Value, Headers: r.Headers}
		t.end[p]++
		results[i] = kafka.ProduceResult{Partition: p, Offset: off}
	}
	return results, first
}

// Scan implements kafka.Scanner over the records ProduceRecords kept (offsets advanced by Produce or
// SetOffsets hold no record and are passed over, like compacted ones), below the partition's end and
// at or above its start. Records are handed to fn in offset order per partition, partitions in order.
func (f *Fake) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	if err := conn.Validate(); err != nil {
		return err
	}
	f.mu.Lock()
	if err := f.begin(ctx, Scan, cloneRanges(ranges)); err != nil {
		f.mu.Unlock()
		return err
	}
	var out []kafka.Record
	for _, topicName := range sortedKeys(ranges) {
		t, ok := f.topics[topicName]
		if !ok {
			continue
		}
		parts := ranges[topicName]
		for _, p := range sortedKeys(parts) {
			r := parts[p]
			if int(p) >= len(t.end) || p < 0 {
				continue
			}
			from, to := max(r.From, t.start[p]), min(r.To, t.end[p])
			for off := from; off < to; off++ {
				if rec, ok := t.records[p][off]; ok {
					out = append(out, rec)
				}
			}
		}
	}
	f.mu.Unlock()
	for _, r := range out {
		if err := ctx.Err(); err != nil {
			return err
		}
		fn(r)
	}
	return nil
}

// Records returns copies of the records kept for one partition, in offset order, without recording a
// call.
func (f *Fake) Records(topicName string, partition int32) []kafka.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.topics[topicName]
	if !ok || int(partition) >= len(t.end) || partition < 0 {
		return nil
	}
	var out []kafka.Record
	for off := t.start[partition]; off < t.end[partition]; off++ {
		if r, ok := t.records[partition][off]; ok {
			out = append(out, r)
		}
	}
	return out
}

// now is the timestamp of a produced record. f.mu must be held.
func (f *Fake) now() time.Time {
	if f.Clock == nil {
		return clock.RealClock{}.Now()
	}
	return f.Clock.Now()
}

func cloneProduceRecord(r kafka.ProduceRecord) kafka.ProduceRecord {
	out := kafka.ProduceRecord{Key: slices.Clone(r.Key), Value: slices.Clone(r.Value), Partition: r.Partition, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, kafka.Header{Key: h.Key, Value: slices.Clone(h.Value)})
	}
	return out
}

func cloneRanges(in map[string]map[int32]kafka.OffsetRange) map[string]map[int32]kafka.OffsetRange {
	out := make(map[string]map[int32]kafka.OffsetRange, len(in))
	for t, ps := range in {
		out[t] = make(map[int32]kafka.OffsetRange, len(ps))
		for p, r := range ps {
			out[t][p] = r
		}
	}
	return out
}

func sortedKeys[K string | int32, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
