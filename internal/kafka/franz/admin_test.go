package franz

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestTopicLifecycle proves create / describe / alter config / add
// partitions / delete round trip with exact figures, plus the typed errors
// for an existing or missing topic.
func TestTopicLifecycle(t *testing.T) {
	c := newCluster(t)
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	const topic = "orders.retry-1"

	if err := a.CreateTopic(ctx, topic, 3, 1, map[string]string{"retention.ms": "86400000", "cleanup.policy": "delete"}); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	got, err := a.DescribeTopics(ctx, topic, "does-not-exist", topic)
	if err != nil {
		t.Fatalf("DescribeTopics: %v", err)
	}
	id := got[topic].ID
	if len(id) != 36 {
		t.Fatalf("DescribeTopics: topic ID %q, want a UUID", id)
	}
	got[topic] = withoutID(got[topic])
	want := map[string]kafka.TopicInfo{
		topic: {Name: topic, Exists: true, Partitions: 3, ReplicationFactor: 1,
			Configs: map[string]string{"retention.ms": "86400000", "cleanup.policy": "delete"}},
		"does-not-exist": {Name: "does-not-exist"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DescribeTopics after create:\n got %+v\nwant %+v", got, want)
	}

	err = a.CreateTopic(ctx, topic, 3, 1, nil)
	if !errors.Is(err, kafka.ErrTopicExists) || kafka.KindOf(err) != kafka.KindTopicExists || !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("second CreateTopic: want kafka.ErrTopicExists, got %v", err)
	}
	if !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		t.Errorf("error lost the broker code: %q", err)
	}

	if err := a.AlterTopicConfigs(ctx, topic, map[string]string{"retention.ms": "3600000", "max.message.bytes": "2097152"}); err != nil {
		t.Fatalf("AlterTopicConfigs: %v", err)
	}
	if err := a.AddPartitions(ctx, topic, 5); err != nil {
		t.Fatalf("AddPartitions: %v", err)
	}
	if err := a.AddPartitions(ctx, topic, 5); err != nil {
		t.Fatalf("AddPartitions to the current count must be a no-op, got %v", err)
	}
	if err := a.AddPartitions(ctx, topic, 2); err == nil || !strings.Contains(err.Error(), "INVALID_PARTITIONS") {
		t.Fatalf("shrinking: want INVALID_PARTITIONS, got %v", err)
	}
	got, err = a.DescribeTopics(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopics: %v", err)
	}
	if got[topic].ID != id {
		t.Fatalf("the topic's ID changed from %q to %q on an alter", id, got[topic].ID)
	}
	got[topic] = withoutID(got[topic])
	want = map[string]kafka.TopicInfo{topic: {Name: topic, Exists: true, Partitions: 5, ReplicationFactor: 1,
		Configs: map[string]string{"retention.ms": "3600000", "cleanup.policy": "delete", "max.message.bytes": "2097152"}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DescribeTopics after alter:\n got %+v\nwant %+v", got, want)
	}

	offs, err := a.ListOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("ListOffsets: %v", err)
	}
	wantOffs := []kafka.PartitionOffsets{po(0, 0, 0), po(1, 0, 0), po(2, 0, 0), po(3, 0, 0), po(4, 0, 0)}
	if !reflect.DeepEqual(offs[topic], wantOffs) {
		t.Fatalf("ListOffsets after growth: got %+v want %+v", offs[topic], wantOffs)
	}

	if err := a.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	got, err = a.DescribeTopics(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopics after delete: %v", err)
	}
	if got[topic].Exists {
		t.Fatalf("topic still exists after delete: %+v", got[topic])
	}
	if err := a.DeleteTopic(ctx, topic); err != nil {
		t.Fatalf("deleting a missing topic must return nil, got %v", err)
	}
	for name, err := range map[string]error{
		"AlterTopicConfigs":   a.AlterTopicConfigs(ctx, topic, map[string]string{"retention.ms": "1"}),
		"AddPartitions":       a.AddPartitions(ctx, topic, 9),
		"DeleteRecordsBefore": a.DeleteRecordsBefore(ctx, topic, map[int32]int64{0: 1}),
	} {
		if !errors.Is(err, kafka.ErrTopicNotFound) || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") {
			t.Errorf("%s on a missing topic: want kafka.ErrTopicNotFound with the code, got %v", name, err)
		}
	}
	if offs, err := a.ListOffsets(ctx, topic); err != nil || len(offs) != 0 {
		t.Errorf("ListOffsets of a missing topic: want empty map, got %v, %v", offs, err)
	}
	if err := a.CreateTopic(ctx, "bad/name", 1, 1, nil); err == nil || !strings.Contains(err.Error(), `contains '/'`) {
		t.Errorf("invalid topic name: got %v", err)
	}
	if err := a.CreateTopic(ctx, "zero", 0, 1, nil); err == nil {
		t.Errorf("zero partitions accepted")
	}
}

// TestCreateTopicBrokerDefaults proves -1 partitions / replication factor
// use the broker defaults.
func TestCreateTopicBrokerDefaults(t *testing.T) {
	c := newCluster(t)
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.CreateTopic(ctx, "defaults", -1, -1, nil); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	got, err := a.DescribeTopics(ctx, "defaults")
	if err != nil {
		t.Fatal(err)
	}
	// kfake's default partition count is 10; rf is min(3, brokers) = 1.
	if info := got["defaults"]; !info.Exists || info.Partitions != 10 || info.ReplicationFactor != 1 || len(info.Configs) != 0 {
		t.Fatalf("got %+v", info)
	}
}

func manyTopics(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("topic-%03d", i)
	}
	return names
}

// TestListOffsetsRequestCount proves ListOffsets over 50 topics costs one
// Metadata request and exactly one ListOffsets request per offset kind, with
// exact figures.
func TestListOffsetsRequestCount(t *testing.T) {
	names := manyTopics(50)
	c := newCluster(t, seedTopics(2, names...))
	produce(t, c, "topic-007", map[int32]int{0: 3, 1: 4})
	produce(t, c, "topic-049", map[int32]int{1: 2})
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.DeleteRecordsBefore(ctx, "topic-007", map[int32]int64{1: 1}); err != nil {
		t.Fatal(err)
	}

	rc := countRequests(c, kmsg.ListOffsets, kmsg.Metadata)
	offs, err := a.ListOffsets(ctx, append(names, "missing-topic")...)
	if err != nil {
		t.Fatalf("ListOffsets: %v", err)
	}
	starts, ends := rc.starts()
	t.Logf("ListOffsets(50 topics): Metadata=%d ListOffsets=%d (start=%d end=%d)", rc.get(kmsg.Metadata), rc.get(kmsg.ListOffsets), starts, ends)
	if starts != 1 || ends != 1 || rc.get(kmsg.ListOffsets) != 2 {
		t.Errorf("want exactly one start and one end ListOffsets request, got start=%d end=%d total=%d", starts, ends, rc.get(kmsg.ListOffsets))
	}
	if m := rc.get(kmsg.Metadata); m != 1 {
		t.Errorf("want one Metadata request, got %d", m)
	}
	if len(offs) != 50 {
		t.Fatalf("want 50 topics, got %d", len(offs))
	}
	if _, ok := offs["missing-topic"]; ok {
		t.Errorf("missing topic present in the result")
	}
	checks := map[string][]kafka.PartitionOffsets{
		"topic-007": {po(0, 0, 3), po(1, 1, 4)},
		"topic-049": {po(0, 0, 0), po(1, 0, 2)},
		"topic-000": {po(0, 0, 0), po(1, 0, 0)},
	}
	for topic, want := range checks {
		if !reflect.DeepEqual(offs[topic], want) {
			t.Errorf("%s: got %+v want %+v", topic, offs[topic], want)
		}
	}
}

// TestDescribeTopicsRequestCount proves DescribeTopics over 50 topics costs
// exactly one Metadata and one DescribeConfigs request.
func TestDescribeTopicsRequestCount(t *testing.T) {
	names := manyTopics(50)
	c := newCluster(t, seedTopics(4, names...))
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.AlterTopicConfigs(ctx, "topic-010", map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	rc := countRequests(c, kmsg.Metadata, kmsg.DescribeConfigs)
	got, err := a.DescribeTopics(ctx, append(names, "nope")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("DescribeTopics(51 names): Metadata=%d DescribeConfigs=%d", rc.get(kmsg.Metadata), rc.get(kmsg.DescribeConfigs))
	if rc.get(kmsg.Metadata) != 1 || rc.get(kmsg.DescribeConfigs) != 1 {
		t.Errorf("want 1 Metadata + 1 DescribeConfigs, got %d + %d", rc.get(kmsg.Metadata), rc.get(kmsg.DescribeConfigs))
	}
	if len(got) != 51 {
		t.Fatalf("want 51 entries, got %d", len(got))
	}
	for _, n := range names {
		info := got[n]
		wantCfg := map[string]string{}
		if n == "topic-010" {
			wantCfg["retention.ms"] = "1000"
		}
		if !info.Exists || info.Partitions != 4 || info.ReplicationFactor != 1 || !maps.Equal(info.Configs, wantCfg) {
			t.Errorf("%s: got %+v", n, info)
		}
	}
	if got["nope"].Exists {
		t.Errorf("missing topic reported as existing")
	}

	// Only missing topics: no DescribeConfigs at all.
	rc.reset()
	if _, err := a.DescribeTopics(ctx, "nope", "nope2"); err != nil {
		t.Fatal(err)
	}
	if rc.get(kmsg.Metadata) != 1 || rc.get(kmsg.DescribeConfigs) != 0 {
		t.Errorf("missing only: want 1 Metadata + 0 DescribeConfigs, got %d + %d", rc.get(kmsg.Metadata), rc.get(kmsg.DescribeConfigs))
	}
}

// TestDeleteRecordsBefore proves trimming moves the start offsets exactly,
// is idempotent below the current start, and rejects offsets past the end.
func TestDeleteRecordsBefore(t *testing.T) {
	c := newCluster(t, seedTopics(3, "dlq"))
	produce(t, c, "dlq", map[int32]int{0: 10, 1: 6, 2: 2})
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)

	if err := a.DeleteRecordsBefore(ctx, "dlq", map[int32]int64{0: 4, 1: -1}); err != nil {
		t.Fatalf("DeleteRecordsBefore: %v", err)
	}
	offs, err := a.ListOffsets(ctx, "dlq")
	if err != nil {
		t.Fatal(err)
	}
	want := []kafka.PartitionOffsets{po(0, 4, 10), po(1, 6, 6), po(2, 0, 2)}
	if !reflect.DeepEqual(offs["dlq"], want) {
		t.Fatalf("after trim: got %+v want %+v", offs["dlq"], want)
	}
	// Below the current start: no-op success, start unchanged.
	if err := a.DeleteRecordsBefore(ctx, "dlq", map[int32]int64{0: 2, 1: 6}); err != nil {
		t.Fatalf("re-trim below start: %v", err)
	}
	offs, err = a.ListOffsets(ctx, "dlq")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(offs["dlq"], want) {
		t.Fatalf("after re-trim: got %+v want %+v", offs["dlq"], want)
	}
	err = a.DeleteRecordsBefore(ctx, "dlq", map[int32]int64{2: 50})
	if err == nil || !errors.Is(err, kerr.OffsetOutOfRange) || !strings.Contains(err.Error(), "OFFSET_OUT_OF_RANGE") {
		t.Fatalf("past the end: want OFFSET_OUT_OF_RANGE, got %v", err)
	}
}

// TestGroupLag proves committed offsets and lag per partition are exact for
// several groups, match kadm's own Lag figures, and cost one OffsetFetch and
// one ListOffsets request.
func TestGroupLag(t *testing.T) {
	c := newCluster(t, seedTopics(3, "src"), seedTopics(1, "other"))
	produce(t, c, "src", map[int32]int{0: 10, 1: 20, 2: 5})
	produce(t, c, "other", map[int32]int{0: 7})
	ctx := ctxT(t)

	ref, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	refAdm := kadm.NewClient(ref)
	commit := func(group string, offs map[string]map[int32]int64) {
		t.Helper()
		os := make(kadm.Offsets)
		for topic, ps := range offs {
			for p, at := range ps {
				os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
			}
		}
		if err := refAdm.CommitAllOffsets(ctx, group, os); err != nil {
			t.Fatalf("commit %s: %v", group, err)
		}
	}
	commit("g1", map[string]map[int32]int64{"src": {0: 4, 1: 20, 2: 1}, "other": {0: 2}})
	commit("g2", map[string]map[int32]int64{"src": {0: 10}})

	a, _ := newAdmin(t, plainConn(c))
	rc := countRequests(c, kmsg.OffsetFetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.FindCoordinator)
	var got map[string]kafka.GroupLagInfo
	for _, round := range []string{"cold client", "warm client"} {
		rc.reset()
		got, err = a.GroupLag(ctx, "g1", "g2", "never-committed")
		if err != nil {
			t.Fatalf("GroupLag: %v", err)
		}
		t.Logf("GroupLag(3 groups, %s): OffsetFetch=%d FindCoordinator=%d Metadata=%d ListOffsets=%d",
			round, rc.get(kmsg.OffsetFetch), rc.get(kmsg.FindCoordinator), rc.get(kmsg.Metadata), rc.get(kmsg.ListOffsets))
		if rc.get(kmsg.OffsetFetch) != 1 || rc.get(kmsg.ListOffsets) != 1 {
			t.Errorf("%s: want 1 OffsetFetch + 1 ListOffsets, got %d + %d", round, rc.get(kmsg.OffsetFetch), rc.get(kmsg.ListOffsets))
		}
	}
	want := map[string]kafka.GroupLagInfo{
		"g1": {Group: "g1", Topics: map[string][]kafka.PartitionLag{
			"src":   {lag(0, 4, 10, 6), lag(1, 20, 20, 0), lag(2, 1, 5, 4)},
			"other": {lag(0, 2, 7, 5)},
		}},
		"g2":              {Group: "g2", Topics: map[string][]kafka.PartitionLag{"src": {lag(0, 10, 10, 0)}}},
		"never-committed": {Group: "never-committed", Topics: map[string][]kafka.PartitionLag{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("GroupLag:\n got %+v\nwant %+v", got, want)
	}
	if g1 := got["g1"]; g1.Total("src") != 10 || g1.Total("other") != 5 || g1.TotalAll() != 15 || g1.Total("absent") != 0 {
		t.Errorf("totals: src=%d other=%d all=%d", g1.Total("src"), g1.Total("other"), g1.TotalAll())
	}

	// Cross-check against kadm's own lag computation.
	lags, err := refAdm.Lag(ctx, "g1", "g2")
	if err != nil {
		t.Fatal(err)
	}
	for g, dl := range lags {
		if dl.Error() != nil {
			t.Fatalf("kadm lag %s: %v", g, dl.Error())
		}
		n := 0
		for _, ml := range dl.Lag.Sorted() {
			ours := findLag(got[g].Topics[ml.Topic], ml.Partition)
			if ml.Commit.At < 0 {
				// kadm also estimates never-committed partitions of an
				// Empty group (end - start); we report committed ones only.
				if ours != nil {
					t.Errorf("%s %s/%d: never committed but reported: %+v", g, ml.Topic, ml.Partition, ours)
				}
				continue
			}
			n++
			if ours == nil || ours.Lag != ml.Lag || ours.Committed != ml.Commit.At || ours.End != ml.End.Offset {
				t.Errorf("%s %s/%d: kadm lag=%d commit=%d end=%d, ours %+v", g, ml.Topic, ml.Partition, ml.Lag, ml.Commit.At, ml.End.Offset, ours)
			}
		}
		if wantN := len(got[g].Topics["src"]) + len(got[g].Topics["other"]); n != wantN {
			t.Errorf("%s: kadm has %d committed partitions, we have %d", g, n, wantN)
		}
	}

	// Deleting a topic drops the group's offsets for it (as in Kafka).
	if err := a.DeleteTopic(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	got, err = a.GroupLag(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if pl, ok := got["g1"].Topics["other"]; ok {
		t.Errorf("deleted topic still reported: %+v", pl)
	}
	if got["g1"].Total("src") != 10 {
		t.Errorf("src lag changed: %d", got["g1"].Total("src"))
	}
}

func findLag(ps []kafka.PartitionLag, p int32) *kafka.PartitionLag {
	for i := range ps {
		if ps[i].Partition == p {
			return &ps[i]
		}
	}
	return nil
}

// po is the offsets of a partition.
func po(partition int32, start, end int64) kafka.PartitionOffsets {
	return kafka.PartitionOffsets{Partition: partition, Start: start, End: end}
}

// lag is the lag of a group on a partition.
func lag(partition int32, committed, end, lag int64) kafka.PartitionLag {
	return kafka.PartitionLag{Partition: partition, Committed: committed, End: end, Lag: lag}
}

func withoutID(ti kafka.TopicInfo) kafka.TopicInfo {
	ti.ID = ""
	return ti
}

// TestTopicIDs reads the IDs Kafka gives topics: a topic deleted and created again under its name
// has a new one, a missing topic none, and every call is one Metadata request.
func TestTopicIDs(t *testing.T) {
	c := newCluster(t)
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	for _, n := range []string{"a.dlq", "b.dlq"} {
		if err := a.CreateTopic(ctx, n, 1, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	rc := countRequests(c, kmsg.Metadata)
	ids, err := a.TopicIDs(ctx, "a.dlq", "b.dlq", "missing")
	if err != nil {
		t.Fatal(err)
	}
	if n := rc.get(kmsg.Metadata); n != 1 {
		t.Errorf("%d Metadata requests, want 1", n)
	}
	if _, ok := ids["missing"]; ok || len(ids["a.dlq"]) != 36 || len(ids["b.dlq"]) != 36 || ids["a.dlq"] == ids["b.dlq"] {
		t.Fatalf("IDs %v: want two distinct UUIDs and no missing topic", ids)
	}
	if err := a.DeleteTopic(ctx, "a.dlq"); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateTopic(ctx, "a.dlq", 1, 1, nil); err != nil {
		t.Fatal(err)
	}
	again, err := a.TopicIDs(ctx, "a.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if again["a.dlq"] == "" || again["a.dlq"] == ids["a.dlq"] {
		t.Fatalf("the recreated topic's ID is %q, the old one %q: want a new one", again["a.dlq"], ids["a.dlq"])
	}
}
