package kafkafake

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestFakeTopics proves the fake mirrors the real Admin semantics for the
// topic lifecycle and records calls with their arguments.
func TestFakeTopics(t *testing.T) {
	ctx := context.Background()
	f := New()
	if err := f.CreateTopic(ctx, "dlq", 3, 2, map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	if err := f.CreateTopic(ctx, "dlq", 3, 2, nil); !errors.Is(err, kafka.ErrTopicExists) || kafka.KindOf(err) != kafka.KindTopicExists {
		t.Fatalf("duplicate create: %v", err)
	}
	if err := f.AlterTopicConfigs(ctx, "dlq", map[string]string{"cleanup.policy": "compact"}); err != nil {
		t.Fatal(err)
	}
	if err := f.AddPartitions(ctx, "dlq", 5); err != nil {
		t.Fatal(err)
	}
	if err := f.AddPartitions(ctx, "dlq", 5); err != nil {
		t.Fatalf("same count must be a no-op: %v", err)
	}
	if err := f.AddPartitions(ctx, "dlq", 1); kafka.CodeOf(err) != "INVALID_PARTITIONS" {
		t.Fatalf("shrink: %v", err)
	}
	got, err := f.DescribeTopics(ctx, "dlq", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if d := got["dlq"]; d.ID == "" {
		t.Fatal("no topic ID")
	} else {
		d.ID = ""
		got["dlq"] = d
	}
	want := map[string]kafka.TopicInfo{
		"dlq":     {Name: "dlq", Exists: true, Partitions: 5, ReplicationFactor: 2, Configs: map[string]string{"retention.ms": "1000", "cleanup.policy": "compact"}},
		"missing": {Name: "missing"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("describe:\n got %+v\nwant %+v", got, want)
	}
	for name, err := range map[string]error{
		"alter": f.AlterTopicConfigs(ctx, "missing", map[string]string{"a": "b"}),
		"grow":  f.AddPartitions(ctx, "missing", 2),
		"trim":  f.DeleteRecordsBefore(ctx, "missing", map[int32]int64{0: 1}),
	} {
		if !errors.Is(err, kafka.ErrTopicNotFound) {
			t.Errorf("%s on a missing topic: %v", name, err)
		}
	}
	if err := f.DeleteTopic(ctx, "dlq"); err != nil {
		t.Fatal(err)
	}
	if err := f.DeleteTopic(ctx, "dlq"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if f.Topic("dlq").Exists {
		t.Fatal("topic survived delete")
	}
	calls := f.CallsTo(CreateTopic)
	if len(calls) != 2 || !reflect.DeepEqual(calls[0].Args, []any{"dlq", int32(3), int16(2), map[string]string{"retention.ms": "1000"}}) {
		t.Fatalf("recorded CreateTopic calls: %+v", calls)
	}
	if f.CallCount(DeleteTopic) != 2 || f.CallCount(Ping) != 0 {
		t.Fatalf("call counts wrong: %+v", f.Calls())
	}
}

// TestFakeOffsetsAndLag proves offsets, trimming and lag arithmetic.
func TestFakeOffsetsAndLag(t *testing.T) {
	ctx := context.Background()
	f := New()
	f.AddTopic("src", 2, 1, nil)
	f.Produce("src", 0, 10)
	f.Produce("src", 1, 4)
	f.Commit("g", "src", 0, 3)
	f.Commit("g", "src", 1, 9) // past the end: lag floors at 0
	f.Commit("g", "gone", 0, 1)

	if err := f.DeleteRecordsBefore(ctx, "src", map[int32]int64{0: 5, 1: -1}); err != nil {
		t.Fatal(err)
	}
	if err := f.DeleteRecordsBefore(ctx, "src", map[int32]int64{0: 2}); err != nil {
		t.Fatalf("below start must be a no-op: %v", err)
	}
	if err := f.DeleteRecordsBefore(ctx, "src", map[int32]int64{0: 11}); kafka.CodeOf(err) != "OFFSET_OUT_OF_RANGE" {
		t.Fatalf("past end: %v", err)
	}
	offs, err := f.ListOffsets(ctx, "src", "nope")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string][]kafka.PartitionOffsets{"src": {po(0, 5, 10), po(1, 4, 4)}}; !reflect.DeepEqual(offs, want) {
		t.Fatalf("offsets: %+v", offs)
	}
	lag, err := f.GroupLag(ctx, "g", "empty")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]kafka.GroupLagInfo{
		"g": {Group: "g", Topics: map[string][]kafka.PartitionLag{
			"src":  {pl(0, 3, 10, 7), pl(1, 9, 4, 0)},
			"gone": {pl(0, 1, -1, -1)},
		}},
		"empty": {Group: "empty", Topics: map[string][]kafka.PartitionLag{}},
	}
	if !reflect.DeepEqual(lag, want) {
		t.Fatalf("lag:\n got %+v\nwant %+v", lag, want)
	}
	if lag["g"].Total("src") != 7 || lag["g"].TotalAll() != 7 {
		t.Fatalf("totals %d %d", lag["g"].Total("src"), lag["g"].TotalAll())
	}
}

// TestFakeErrorInjection proves persistent and one-shot errors per method,
// that failing calls are still recorded, and that classification helpers
// work on injected sentinels.
func TestFakeErrorInjection(t *testing.T) {
	ctx := context.Background()
	f := New()
	f.SetError(Ping, kafka.ErrUnreachable)
	for range 2 {
		if err := f.Ping(ctx); !kafka.IsUnreachable(err) {
			t.Fatalf("want unreachable, got %v", err)
		}
	}
	f.SetError(Ping, nil)
	if err := f.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	denied := kafka.NewError("create topic", kafka.KindAuth, errors.New("TOPIC_AUTHORIZATION_FAILED"), "").WithCode("TOPIC_AUTHORIZATION_FAILED", false)
	f.FailNext(CreateTopic, denied, errors.New("boom"))
	if err := f.CreateTopic(ctx, "t", 1, 1, nil); !kafka.IsAuthError(err) {
		t.Fatalf("first: %v", err)
	}
	if err := f.CreateTopic(ctx, "t", 1, 1, nil); err == nil || err.Error() != "boom" {
		t.Fatalf("second: %v", err)
	}
	if err := f.CreateTopic(ctx, "t", 1, 1, nil); err != nil {
		t.Fatalf("third: %v", err)
	}
	if !f.Topic("t").Exists || f.CallCount(CreateTopic) != 3 || f.CallCount(Ping) != 3 {
		t.Fatalf("state or calls wrong: %+v", f.Calls())
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.DescribeTopics(cctx, "t"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled context: %v", err)
	}
	f.ResetCalls()
	if len(f.Calls()) != 0 {
		t.Fatal("ResetCalls kept calls")
	}
}

func po(p int32, start, end int64) kafka.PartitionOffsets {
	return kafka.PartitionOffsets{Partition: p, Start: start, End: end}
}

func pl(p int32, committed, end, lag int64) kafka.PartitionLag {
	return kafka.PartitionLag{Partition: p, Committed: committed, End: end, Lag: lag}
}

func TestFakeGroupOffsets(t *testing.T) {
	ctx := context.Background()
	f := New()
	f.AddTopic("src", 2, 1, nil)
	f.Commit("g", "src", 0, 3)
	f.Commit("g", "src", 1, 9)
	got, err := f.GroupOffsets(ctx, "g", "empty")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]kafka.GroupOffsets{
		"g":     {Group: "g", Topics: map[string]map[int32]int64{"src": {0: 3, 1: 9}}},
		"empty": {Group: "empty", Topics: map[string]map[int32]int64{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets:\n got %+v\nwant %+v", got, want)
	}
	if n := f.CallCount(GroupOffsets); n != 1 {
		t.Fatalf("%d calls recorded", n)
	}
}
