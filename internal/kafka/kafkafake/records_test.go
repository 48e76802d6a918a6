package kafkafake

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
)

// The Fake is a kafka.ClientFactory: records produced to it are scanned back, deleted records are
// not, and a record for a missing partition fails alone.
func TestFakeProducesAndScansRecords(t *testing.T) {
	ctx := context.Background()
	conn := kafka.Connection{BootstrapServers: []string{"kafka:9092"}}
	f := New()
	f.Clock = clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	f.AddTopic("t", 2, 1, nil)
	res, err := f.ProduceRecords(ctx, conn, "t", []kafka.ProduceRecord{
		{Key: []byte("a"), Value: []byte("1"), Headers: []kafka.Header{{Key: "h", Value: []byte("x")}}, Partition: 1},
		{Key: []byte("b"), Value: []byte("2"), Partition: 1},
		{Key: []byte("c"), Partition: 5},
		{Key: []byte("d"), Partition: -1}, // FNV-1a: partition 1 of 2
	})
	if err == nil || res[2].Err == nil || res[0].Err != nil || res[1].Offset != 1 || res[3].Err != nil {
		t.Fatalf("results %+v, err %v", res, err)
	}
	if _, err := f.ProduceRecords(ctx, conn, "missing", []kafka.ProduceRecord{{}}); kafka.KindOf(err) != kafka.KindTopicNotFound {
		t.Fatalf("produce to a missing topic: %v", err)
	}
	if err := f.DeleteRecordsBefore(ctx, "t", map[int32]int64{1: 1}); err != nil {
		t.Fatal(err)
	}
	var got []kafka.Record
	if err := f.Scan(ctx, conn, map[string]map[int32]kafka.OffsetRange{"t": {1: {From: 0, To: 10}}}, func(r kafka.Record) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || string(got[0].Key) != "b" || string(got[1].Key) != "d" || got[0].Offset != 1 || !got[0].Timestamp.Equal(f.Clock.Now()) {
		t.Fatalf("scanned %+v, want b at offset 1 and d", got)
	}
	if rs := f.Records("t", 1); len(rs) != 2 || string(rs[0].Value) != "2" {
		t.Fatalf("Records: %+v", rs)
	}
	if a, err := f.Admin(ctx, conn); err != nil || a.(connAdmin).Fake != f {
		t.Fatalf("Admin: %v %v", a, err)
	}
	if f.CallCount(ProduceRecords) != 2 || f.CallCount(Scan) != 1 {
		t.Errorf("calls %+v", f.Calls())
	}
}
