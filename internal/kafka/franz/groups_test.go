package franz

import (
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestGroupOffsets proves the committed offsets of several groups come back exact from one
// OffsetFetch request and no ListOffsets or Metadata request once the client is warm.
func TestGroupOffsets(t *testing.T) {
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
	os := make(kadm.Offsets)
	for p, at := range map[int32]int64{0: 4, 1: 20} {
		os.Add(kadm.Offset{Topic: "src", Partition: p, At: at, LeaderEpoch: -1})
	}
	os.Add(kadm.Offset{Topic: "other", Partition: 0, At: 2, LeaderEpoch: -1})
	if err := refAdm.CommitAllOffsets(ctx, "g1", os); err != nil {
		t.Fatal(err)
	}

	a, _ := newAdmin(t, plainConn(c))
	rc := countRequests(c, kmsg.OffsetFetch, kmsg.ListOffsets, kmsg.Metadata, kmsg.FindCoordinator)
	var got map[string]kafka.GroupOffsets
	for _, round := range []string{"cold client", "warm client"} {
		rc.reset()
		got, err = a.GroupOffsets(ctx, "g1", "never-committed", "g1")
		if err != nil {
			t.Fatalf("kafka.GroupOffsets: %v", err)
		}
		t.Logf("GroupOffsets(2 groups, %s): OffsetFetch=%d FindCoordinator=%d Metadata=%d ListOffsets=%d",
			round, rc.get(kmsg.OffsetFetch), rc.get(kmsg.FindCoordinator), rc.get(kmsg.Metadata), rc.get(kmsg.ListOffsets))
		if rc.get(kmsg.OffsetFetch) != 1 || rc.get(kmsg.ListOffsets) != 0 {
			t.Errorf("%s: want 1 OffsetFetch and no ListOffsets, got %d and %d", round, rc.get(kmsg.OffsetFetch), rc.get(kmsg.ListOffsets))
		}
	}
	if n := rc.get(kmsg.Metadata) + rc.get(kmsg.FindCoordinator); n != 0 {
		t.Errorf("warm client: %d Metadata and FindCoordinator requests, want 0", n)
	}
	want := map[string]kafka.GroupOffsets{
		"g1":              {Group: "g1", Topics: map[string]map[int32]int64{"src": {0: 4, 1: 20}, "other": {0: 2}}},
		"never-committed": {Group: "never-committed", Topics: map[string]map[int32]int64{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("kafka.GroupOffsets:\n got %+v\nwant %+v", got, want)
	}
}
