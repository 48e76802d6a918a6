package kafkastats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

func produceDeadLetters(t *testing.T, addrs []string, topic string, from, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	reasons := []string{"max_retries_exceeded", "max_retries_exceeded", "non_retriable_error"}
	for i := from; i < from+n; i++ {
		r := &kgo.Record{
			Topic: topic, Partition: int32(i % 3), Value: []byte("v"),
			Timestamp: time.UnixMilli(1_700_000_000_000 + int64(i)*1000),
			Headers: []kgo.RecordHeader{
				{Key: HeaderReason, Value: []byte(reasons[i%3])},
				{Key: HeaderErrorType, Value: []byte(fmt.Sprintf("E%d", i%2))},
				{Key: HeaderPipeline, Value: []byte("ns/chat")},
			},
		}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTallyCountsIncrementallyAndForgetsTrimmedRecords(t *testing.T) {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := franz.NewFactory()
	defer f.Close()
	conn := kafka.Connection{BootstrapServers: cluster.ListenAddrs()}
	admin, err := f.Admin(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	tally := NewTally()
	read := 0
	refresh := func() Breakdown {
		t.Helper()
		offsets, err := admin.ListOffsets(ctx, "dlq")
		if err != nil {
			t.Fatal(err)
		}
		ranges := tally.Plan(offsets["dlq"])
		if err := f.Scan(ctx, conn, map[string]map[int32]kafka.OffsetRange{"dlq": ranges}, func(r kafka.Record) { read++; tally.Add(r) }); err != nil {
			t.Fatal(err)
		}
		return tally.Breakdown(20)
	}

	produceDeadLetters(t, cluster.ListenAddrs(), "dlq", 0, 30)
	b := refresh()
	if b.Messages != 30 || read != 30 {
		t.Fatalf("after 30 dead letters: %d tallied, %d read", b.Messages, read)
	}
	want := []Count{{Name: "max_retries_exceeded", Count: 20}, {Name: "non_retriable_error", Count: 10}}
	if fmt.Sprint(b.Reasons) != fmt.Sprint(want) {
		t.Fatalf("reasons %v, want %v", b.Reasons, want)
	}
	if fmt.Sprint(b.ErrorTypes) != "[{E0 15} {E1 15}]" || fmt.Sprint(b.Pipelines) != "[{ns/chat 30}]" {
		t.Fatalf("error types %v, pipelines %v", b.ErrorTypes, b.Pipelines)
	}
	if !b.Oldest.Equal(time.UnixMilli(1_700_000_000_000)) || !b.Newest.Equal(time.UnixMilli(1_700_000_029_000)) {
		t.Fatalf("oldest %s newest %s", b.Oldest, b.Newest)
	}

	// A refresh with nothing new reads nothing; new records are read alone.
	refresh()
	if read != 30 {
		t.Fatalf("an idle refresh read %d records", read-30)
	}
	produceDeadLetters(t, cluster.ListenAddrs(), "dlq", 30, 6)
	if b = refresh(); b.Messages != 36 || read != 36 {
		t.Fatalf("after 6 more: %d tallied, %d read in all", b.Messages, read)
	}

	// Trimming the oldest 4 records of each partition takes them out of the counts.
	for p := range int32(3) {
		if err := admin.DeleteRecordsBefore(ctx, "dlq", map[int32]int64{p: 4}); err != nil {
			t.Fatal(err)
		}
	}
	b = refresh()
	if b.Messages != 24 || read != 36 {
		t.Fatalf("after trimming 12: %d tallied, %d read in all", b.Messages, read)
	}
	var total int64
	for _, c := range b.Reasons {
		total += c.Count
	}
	if total != 24 || !b.Oldest.Equal(time.UnixMilli(1_700_000_012_000)) {
		t.Fatalf("after trimming: reasons sum to %d, oldest %s", total, b.Oldest)
	}
}
