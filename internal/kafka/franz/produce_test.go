package franz

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// ProduceRecords writes key, value and headers, to the partition asked or by key, with an
// idempotent producer and acks from all replicas, and returns each record's offset; a Scan reads
// them back whole.
func TestProduceRecordsIdempotentAcksAllAndReadBack(t *testing.T) {
	c := newCluster(t, seedTopics(3, "replay"))
	var (
		mu          sync.Mutex
		acks        []int16
		idempotent  = true
		initPIDSeen bool
	)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		mu.Lock()
		defer mu.Unlock()
		acks = append(acks, pr.Acks)
		for _, tp := range pr.Topics {
			for _, p := range tp.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(p.Records); err == nil && b.ProducerID < 0 {
					idempotent = false
				}
			}
		}
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.InitProducerID), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		initPIDSeen = true
		mu.Unlock()
		return nil, nil, false
	})
	conn := plainConn(c)
	_, f := newAdmin(t, conn)

	recs := []kafka.ProduceRecord{
		{Key: []byte("k0"), Value: []byte("v0"), Headers: []kafka.Header{{Key: "h", Value: []byte("1")}, {Key: "h", Value: []byte("2")}}, Partition: 2},
		{Key: []byte("k1"), Value: []byte("v1"), Partition: 2},
		{Key: []byte("by-key"), Value: nil, Partition: -1},
		{Key: []byte("by-key"), Value: []byte("again"), Partition: -1},
	}
	res, err := f.ProduceRecords(ctxT(t), conn, "replay", recs)
	if err != nil {
		t.Fatalf("ProduceRecords: %v", err)
	}
	if len(res) != 4 || res[0].Partition != 2 || res[0].Offset != 0 || res[1].Partition != 2 || res[1].Offset != 1 {
		t.Fatalf("results %+v, want records 0 and 1 at replay[2] offsets 0 and 1", res)
	}
	if res[2].Partition != res[3].Partition || res[3].Offset != res[2].Offset+1 {
		t.Errorf("the same key went to %d@%d and %d@%d, want one partition, consecutive", res[2].Partition, res[2].Offset, res[3].Partition, res[3].Offset)
	}
	// Kafka's own key hash: the Java client puts "by-key" where kgo's default partitioner does.
	if want := kgo.StickyKeyPartitioner(nil).ForTopic("replay").Partition(&kgo.Record{Key: []byte("by-key")}, 3); int(res[2].Partition) != want {
		t.Errorf("by-key went to partition %d, want Kafka's murmur2 partition %d", res[2].Partition, want)
	}
	mu.Lock()
	if !idempotent || !initPIDSeen {
		t.Errorf("producer not idempotent (producer id on every batch %v, InitProducerID seen %v)", idempotent, initPIDSeen)
	}
	for _, a := range acks {
		if a != -1 {
			t.Errorf("produce with acks %d, want -1 (all)", a)
		}
	}
	mu.Unlock()

	var got []kafka.Record
	err = f.Scan(ctxT(t), conn, map[string]map[int32]kafka.OffsetRange{"replay": {2: {From: 0, To: 2}}}, func(r kafka.Record) {
		r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
		hs := make([]kafka.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = kafka.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		r.Headers = hs
		got = append(got, r)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Key) != "k0" || string(got[0].Value) != "v0" || len(got[0].Headers) != 2 ||
		string(got[0].Headers[1].Value) != "2" || string(got[1].Key) != "k1" || len(got[1].Headers) != 0 {
		t.Fatalf("read back %+v", got)
	}
}

// A record for a partition the topic lacks fails alone; the call's error names it and the other
// records are written.
func TestProduceRecordsReportsEachRecordsError(t *testing.T) {
	c := newCluster(t, seedTopics(1, "replay"))
	conn := plainConn(c)
	_, f := newAdmin(t, conn)
	res, err := f.ProduceRecords(ctxT(t), conn, "replay", []kafka.ProduceRecord{
		{Value: []byte("ok"), Partition: 0},
		{Value: []byte("nowhere"), Partition: 7},
	})
	if err == nil {
		t.Fatal("no error for a record to partition 7 of a one-partition topic")
	}
	var ke *kafka.Error
	if res[0].Err != nil || res[1].Err == nil || !errors.As(res[1].Err, &ke) || !errors.Is(err, res[1].Err) {
		t.Fatalf("results %+v, error %v: want only the second record failed, as a *kafka.Error", res, err)
	}
	if res[0].Offset != 0 {
		t.Errorf("first record at %d", res[0].Offset)
	}
	// A canceled context fails the records instead of hanging.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.ProduceRecords(ctx, conn, "replay", []kafka.ProduceRecord{{Value: []byte("late")}}); err == nil {
		t.Error("produce with a canceled context succeeded")
	}
	// An invalid topic name is refused before anything is sent.
	if _, err := f.ProduceRecords(ctxT(t), conn, "a b", []kafka.ProduceRecord{{}}); err == nil {
		t.Error("produce to topic \"a b\" accepted")
	}
	// A closed factory refuses.
	f.Close()
	if _, err := f.ProduceRecords(ctxT(t), conn, "replay", []kafka.ProduceRecord{{}}); !errors.Is(err, kafka.ErrClosed) {
		t.Errorf("produce after Close: %v, want ErrClosed", err)
	}
}

// A topic deleted and created again (out of band, or a record of decisions the queue reconciler
// makes again) is produced to by the cached client: franz-go keeps the old topic ID and fails the
// topic with UNKNOWN_TOPIC_ID until it is purged, so every later state write, tombstone and replay
// to it would fail for as long as the client is in use.
func TestProduceToATopicCreatedAgain(t *testing.T) {
	c := newCluster(t, seedTopics(2, "dlq.state"))
	conn := plainConn(c)
	a, f := newAdmin(t, conn)
	ctx := ctxT(t)
	if _, err := f.ProduceRecords(ctx, conn, "dlq.state", []kafka.ProduceRecord{{Key: []byte("0/0"), Value: []byte("old"), Partition: -1}}); err != nil {
		t.Fatal(err)
	}
	other, _ := newAdmin(t, conn)
	if err := other.DeleteTopic(ctx, "dlq.state"); err != nil {
		t.Fatal(err)
	}
	if err := other.CreateTopic(ctx, "dlq.state", 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	for i, v := range []string{"new", "newer"} {
		res, err := f.ProduceRecords(ctx, conn, "dlq.state", []kafka.ProduceRecord{{Key: []byte("0/0"), Value: []byte(v), Partition: -1}, {Key: []byte("1/0"), Value: []byte(v), Partition: 1}})
		if err != nil {
			t.Fatalf("produce %d after the topic was created again: %v", i, err)
		}
		if res[1].Partition != 1 || res[1].Offset != int64(i) {
			t.Errorf("produce %d: results %+v", i, res)
		}
	}
	offs, err := a.ListOffsets(ctx, "dlq.state")
	if err != nil {
		t.Fatal(err)
	}
	n := int64(0)
	for _, p := range offs["dlq.state"] {
		n += p.End - p.Start
	}
	if n != 4 {
		t.Errorf("the topic created again holds %d records, want 4: %+v", n, offs)
	}
}
