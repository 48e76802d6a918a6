package franz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/kafka"
)

// Scan implements kafka.Scanner with one consumer client for all the ranges.
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
	opts = append(opts, kgo.ConsumePartitions(start), kgo.FetchMaxWait(200*time.Millisecond))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer cl.Close()
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
					fn(record(r))
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

// record converts a franz-go record to the kafka package's.
func record(r *kgo.Record) kafka.Record {
	out := kafka.Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
	if len(r.Headers) > 0 {
		out.Headers = make([]kafka.Header, len(r.Headers))
		for i, h := range r.Headers {
			out.Headers[i] = kafka.Header{Key: h.Key, Value: h.Value}
		}
	}
	return out
}
