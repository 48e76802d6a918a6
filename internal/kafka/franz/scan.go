package franz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/kafka"
)

// The bounds of a scan's fetches. A scan reads every record of a dead letter topic the tally has
// not seen, which on a queue's first refresh is all of them. With franz-go's defaults (up to 1 MiB
// per partition and 50 MiB per fetch, one fetch per broker read ahead while the last is handed out)
// a scan of a topic of many partitions holds tens of MiB of raw batches per broker, plus the same
// decompressed, plus their decoded records (all decoded before the poll returns): with the tally's
// own growth, the first refresh of a large queue took the manager past its 256Mi limit. The bounds
// hold a scan to two fetches of at most scanFetchMaxBytes each (the one handed to fn and the one
// read ahead), whatever the size of the topic and the number of its partitions and brokers:
// BenchmarkTallyFromScratch tallies 1,000,000 dead letters with under 50 MiB of heap, and
// TestScanHeapFollowsTheFetchBoundNotTheTopic guards the bound. Kafka still returns a first batch
// larger than the bound whole, so a topic of larger batches is read one batch per fetch;
// BrokerMaxReadBytes keeps franz-go's default (100 MiB), a guard against corrupt sizes, not a
// budget.
const (
	// scanFetchMaxBytes bounds the records of one fetch response.
	scanFetchMaxBytes = 1 << 20
	// scanFetchMaxPartitionBytes bounds a partition's share of a fetch: the whole fetch, so that a
	// scan of one partition is not slower than one of many.
	scanFetchMaxPartitionBytes = scanFetchMaxBytes
	// scanConcurrentFetches is the number of fetches in flight or buffered, over every broker.
	scanConcurrentFetches = 1
)

// Scan implements kafka.Scanner with one consumer client for all the ranges, fetching at most
// scanFetchMaxBytes at a time. The headers of the record handed to fn are valid only during the
// call (their slice is reused, their values point into the fetch buffer).
func (f *Factory) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	pending := map[string]map[int32]int64{} // topic → partition → end offset still to reach
	start := map[string]map[int32]kgo.Offset{}
	for topic, parts := range ranges {
		for part, r := range parts {
			if r.From >= r.To {
				continue
			}
			if pending[topic] == nil {
				pending[topic], start[topic] = map[int32]int64{}, map[int32]kgo.Offset{}
			}
			pending[topic][part] = r.To
			start[topic][part] = kgo.NewOffset().At(r.From)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	opts, err := ClientOptions(conn, f.cfg.requestTimeout)
	if err != nil {
		return err
	}
	opts = append(opts, kgo.ConsumePartitions(start), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.FetchMaxBytes(scanFetchMaxBytes), kgo.FetchMaxPartitionBytes(scanFetchMaxPartitionBytes),
		kgo.MaxConcurrentFetches(scanConcurrentFetches))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer cl.Close()
	var hs []kafka.Header // the headers of the record handed to fn, reused
	for len(pending) > 0 {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("scan: %d topics not read to the end: %w", len(pending), err)
		}
		var fetchErr error
		fetches.EachError(func(topic string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				fetchErr = fmt.Errorf("scan %s[%d]: %w", topic, part, err)
			}
		})
		if fetchErr != nil {
			secret := ""
			if conn.SASL != nil {
				secret = conn.SASL.Password
			}
			return newError("Scan", kafka.KindOther, fetchErr, secret)
		}
		fetches.EachPartition(func(p kgo.FetchTopicPartition) {
			end, ok := pending[p.Topic][p.Partition]
			if !ok {
				return
			}
			for _, r := range p.Records {
				if r.Offset < end {
					var out kafka.Record
					out, hs = record(r, hs[:0])
					fn(out)
				}
			}
			last := int64(-1)
			if n := len(p.Records); n > 0 {
				last = p.Records[n-1].Offset
			}
			if last+1 >= end {
				delete(pending[p.Topic], p.Partition)
				if len(pending[p.Topic]) == 0 {
					delete(pending, p.Topic)
				}
			}
		})
	}
	return nil
}

// record converts a franz-go record to the kafka package's, appending its headers to hs (which
// it returns, for reuse): a scan allocates no headers per record.
func record(r *kgo.Record, hs []kafka.Header) (kafka.Record, []kafka.Header) {
	out := kafka.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, Key: r.Key, Value: r.Value}
	if len(r.Headers) > 0 {
		for _, h := range r.Headers {
			hs = append(hs, kafka.Header{Key: h.Key, Value: h.Value})
		}
		out.Headers = hs
	}
	return out, hs
}
