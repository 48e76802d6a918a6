package franz

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/kafka"
)

// ProduceRecords implements kafka.Producer with the connection's cached client (the one Admin
// returns): franz-go's producer is idempotent with acks=all by default, and the client is built with
// a partitioner that honours a record's explicit partition and otherwise hashes its key as Kafka
// does. The call is bounded by the request timeout, as an Admin call is, and counts as a use of the
// client for the idle sweep.
func (f *Factory) ProduceRecords(ctx context.Context, conn kafka.Connection, topic string, records []kafka.ProduceRecord) ([]kafka.ProduceResult, error) {
	op := fmt.Sprintf("produce %d records to topic %q", len(records), topic)
	if err := validateTopicName(topic); err != nil {
		return nil, newError(op, kafka.KindOther, err, "")
	}
	adm, err := f.Admin(ctx, conn)
	if err != nil {
		return nil, err
	}
	a := adm.(*kadmAdmin)
	results := make([]kafka.ProduceResult, len(records))
	if len(records) == 0 {
		return results, nil
	}
	ctx, c, done, err := a.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	defer done()

	a.produce(ctx, c, topic, records, results, nil)
	var again []int
	for i, r := range results {
		if errors.Is(r.Err, kerr.UnknownTopicID) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		// The topic was deleted and created again since this client produced to it: franz-go keeps
		// the old topic ID and fails the topic until it is purged (its README). These records went
		// nowhere; they go once more, to the topic of that name now.
		a.cl.PurgeTopicsFromProducing(topic)
		a.produce(ctx, c, topic, records, results, again)
	}
	for _, r := range results {
		if r.Err != nil {
			return results, r.Err
		}
	}
	return results, nil
}

// produce writes records (those at indexes only, or all when nil) and fills their results.
func (a *kadmAdmin) produce(ctx context.Context, c *call, topic string, records []kafka.ProduceRecord, results []kafka.ProduceResult, only []int) {
	if only == nil {
		only = make([]int, len(records))
		for i := range only {
			only[i] = i
		}
	}
	var wg sync.WaitGroup
	wg.Add(len(only))
	for _, i := range only {
		r := records[i]
		results[i] = kafka.ProduceResult{}
		kr := &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Partition: r.Partition, Timestamp: r.Timestamp}
		if len(r.Headers) > 0 {
			kr.Headers = make([]kgo.RecordHeader, len(r.Headers))
			for j, h := range r.Headers {
				kr.Headers[j] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		a.cl.Produce(ctx, kr, func(kr *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				results[i].Err = c.fail(ctx, err)
				return
			}
			results[i].Partition, results[i].Offset = kr.Partition, kr.Offset
		})
	}
	// franz-go fails every buffered record once ctx is done, so this wait ends within the call's
	// timeout.
	wg.Wait()
}

// explicitOrKeyPartitioner sends a record with a partition >= 0 to that partition (franz-go fails a
// record whose partition the topic does not have) and any other by Kafka's key hash (sticky for a
// nil key), so that one client serves ProduceRecords' two ways of placing a record.
type explicitOrKeyPartitioner struct{ byKey kgo.Partitioner }

func newExplicitOrKeyPartitioner() kgo.Partitioner {
	return explicitOrKeyPartitioner{byKey: kgo.StickyKeyPartitioner(nil)}
}

func (p explicitOrKeyPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &explicitOrKeyTopic{byKey: p.byKey.ForTopic(topic)}
}

type explicitOrKeyTopic struct{ byKey kgo.TopicPartitioner }

func (p *explicitOrKeyTopic) RequiresConsistency(r *kgo.Record) bool {
	return r.Partition >= 0 || p.byKey.RequiresConsistency(r)
}

func (p *explicitOrKeyTopic) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return p.byKey.Partition(r, n)
}

// OnNewBatch lets the sticky partitioning of nil keys move on, as it does unwrapped.
func (p *explicitOrKeyTopic) OnNewBatch() {
	if nb, ok := p.byKey.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
