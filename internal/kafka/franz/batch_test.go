package franz

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/kafka"
)

const testWindow = 10 * time.Millisecond

// batchKeys are the requests the batched methods send.
var batchKeys = []kmsg.Key{kmsg.Metadata, kmsg.DescribeConfigs, kmsg.CreateTopics, kmsg.IncrementalAlterConfigs, kmsg.CreatePartitions}

// concurrently runs fn(0..n-1) on n goroutines and waits for them all.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { fn(i) })
	}
	wg.Wait()
}

// counts is what rc counted of batchKeys, named.
func counts(rc *requestCounter) map[string]int {
	out := map[string]int{}
	for _, k := range batchKeys {
		if n := rc.get(k); n > 0 {
			out[k.Name()] = n
		}
	}
	return out
}

// sameError fails unless got is the error want is: the same message, kind, code and sentinels.
func sameError(t *testing.T, what string, got, want error) {
	t.Helper()
	if want == nil || got == nil {
		if (got == nil) != (want == nil) {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
		return
	}
	if got.Error() != want.Error() || kafka.KindOf(got) != kafka.KindOf(want) || kafka.CodeOf(got) != kafka.CodeOf(want) ||
		errors.Is(got, kafka.ErrTopicExists) != errors.Is(want, kafka.ErrTopicExists) || errors.Is(got, kafka.ErrTopicNotFound) != errors.Is(want, kafka.ErrTopicNotFound) {
		t.Errorf("%s:\n got %v (%s, %q)\nwant %v (%s, %q)", what, got, kafka.KindOf(got), kafka.CodeOf(got), want, kafka.KindOf(want), kafka.CodeOf(want))
	}
}

// TestBatchedDescribesSendOneRequest: 100 reconcilers describing their own topic at once cost one
// Metadata and one DescribeConfigs request through the batching admin, against 100 of each
// unbatched, with the same answers; the window holds the batch until the clock passes it.
func TestBatchedDescribesSendOneRequest(t *testing.T) {
	names := manyTopics(100)
	c := newCluster(t, seedTopics(2, names...))
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.AlterTopicConfigs(ctx, "topic-007", map[string]string{"retention.ms": "1000"}); err != nil {
		t.Fatal(err)
	}
	ask := append(names[:99:99], "missing")

	rc := countRequests(c, batchKeys...)
	alone := make([]map[string]kafka.TopicInfo, len(ask))
	concurrently(len(ask), func(i int) {
		var err error
		if alone[i], err = a.DescribeTopics(ctx, ask[i]); err != nil {
			t.Errorf("unbatched %s: %v", ask[i], err)
		}
	})
	before := counts(rc)

	clk := newFakeClock()
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{Window: testWindow, Clock: clk})
	rc.reset()
	got := make([]map[string]kafka.TopicInfo, len(ask))
	done := make(chan struct{})
	go func() {
		defer close(done)
		concurrently(len(ask), func(i int) {
			var err error
			if got[i], err = b.DescribeTopics(ctx, ask[i]); err != nil {
				t.Errorf("batched %s: %v", ask[i], err)
			}
		})
	}()
	g := gomega.NewWithT(t)
	g.Eventually(b.Queued).Should(gomega.Equal(len(ask)))
	g.Consistently(func() map[string]int { return counts(rc) }, 3*testWindow).Should(gomega.BeEmpty(), "sent before the window ended")
	clk.Step(testWindow)
	<-done
	after := counts(rc)
	t.Logf("100 concurrent DescribeTopics: unbatched %v, batched %v", before, after)
	if want := map[string]int{"Metadata": 100, "DescribeConfigs": 99}; !reflect.DeepEqual(before, want) {
		t.Errorf("unbatched: %v, want %v", before, want)
	}
	if want := map[string]int{"Metadata": 1, "DescribeConfigs": 1}; !reflect.DeepEqual(after, want) {
		t.Errorf("batched: %v, want %v", after, want)
	}
	if !reflect.DeepEqual(got, alone) {
		t.Errorf("batched answers differ from the unbatched ones")
	}
	if got[7]["topic-007"].Configs["retention.ms"] != "1000" || got[99]["missing"].Exists {
		t.Errorf("answers: %+v, %+v", got[7], got[99])
	}

	// Topic IDs: one Metadata request, no DescribeConfigs.
	rc.reset()
	ids := make([]map[string]string, len(ask))
	b = kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: len(ask), Clock: clk})
	concurrently(len(ask), func(i int) { ids[i], _ = b.TopicIDs(ctx, ask[i]) })
	if after := counts(rc); !reflect.DeepEqual(after, map[string]int{"Metadata": 1}) {
		t.Errorf("batched TopicIDs: %v, want one Metadata", after)
	}
	for i, n := range ask[:99] {
		if ids[i][n] != alone[i][n].ID || ids[i][n] == "" {
			t.Errorf("ID of %s: %q, want %q", n, ids[i][n], alone[i][n].ID)
		}
	}
	if len(ids[99]) != 0 {
		t.Errorf("a missing topic has an ID: %v", ids[99])
	}
}

// TestBatchedCreatesFailOnlyTheBadTopic: 50 concurrent creates send one CreateTopics request; the
// create of a topic that exists and one the cluster cannot replicate fail alone, each with the
// error the unbatched admin gives, and the other 48 topics are made.
func TestBatchedCreatesFailOnlyTheBadTopic(t *testing.T) {
	c := newCluster(t, seedTopics(1, "taken"))
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	names := manyTopics(50)
	names[10], names[20] = "taken", "unreplicable"
	rf := func(n string) int16 {
		if n == "unreplicable" {
			return 3
		}
		return 1
	}
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: 50, Clock: newFakeClock()})
	rc := countRequests(c, batchKeys...)
	errs := make([]error, len(names))
	concurrently(len(names), func(i int) {
		errs[i] = b.CreateTopic(ctx, names[i], 2, rf(names[i]), map[string]string{"retention.ms": fmt.Sprint(1000 + i)})
	})
	if got := counts(rc); !reflect.DeepEqual(got, map[string]int{"CreateTopics": 1}) {
		t.Errorf("50 batched creates sent %v, want one CreateTopics", got)
	}
	rc.reset()
	for i, n := range names {
		switch n {
		case "taken", "unreplicable":
			sameError(t, n, errs[i], a.CreateTopic(ctx, n, 2, rf(n), nil))
		default:
			if errs[i] != nil {
				t.Errorf("create %s: %v", n, errs[i])
			}
		}
	}
	if !errors.Is(errs[10], kafka.ErrTopicExists) || kafka.CodeOf(errs[20]) != "INVALID_REPLICATION_FACTOR" {
		t.Errorf("errors: %v; %v", errs[10], errs[20])
	}
	got, err := a.DescribeTopics(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		want := kafka.TopicInfo{Name: n, ID: got[n].ID, Exists: true, Partitions: 2, ReplicationFactor: 1, Configs: map[string]string{"retention.ms": fmt.Sprint(1000 + i)}}
		switch n {
		case "taken":
			want.Partitions, want.Configs = 1, map[string]string{}
		case "unreplicable":
			want = kafka.TopicInfo{Name: n}
		}
		if !reflect.DeepEqual(got[n], want) {
			t.Errorf("%s: %+v, want %+v", n, got[n], want)
		}
	}
}

// TestBatchedAltersAndGrowthFailOnlyTheBadTopic: concurrent config alters send one
// IncrementalAlterConfigs request, partition increases one Metadata and one CreatePartitions; a
// missing topic and a shrink fail alone with the unbatched admin's errors.
func TestBatchedAltersAndGrowthFailOnlyTheBadTopic(t *testing.T) {
	names := manyTopics(30)
	c := newCluster(t, seedTopics(2, names...))
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	ask := append(names[:30:30], "missing")
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{MaxCalls: len(ask), Clock: newFakeClock()})
	rc := countRequests(c, batchKeys...)
	errs := make([]error, len(ask))
	concurrently(len(ask), func(i int) {
		errs[i] = b.AlterTopicConfigs(ctx, ask[i], map[string]string{"retention.ms": fmt.Sprint(5000 + i)})
	})
	if got := counts(rc); !reflect.DeepEqual(got, map[string]int{"IncrementalAlterConfigs": 1}) {
		t.Errorf("31 batched alters sent %v, want one IncrementalAlterConfigs", got)
	}
	for i := range names {
		if errs[i] != nil {
			t.Errorf("alter %s: %v", names[i], errs[i])
		}
	}
	sameError(t, "alter of a missing topic", errs[30], a.AlterTopicConfigs(ctx, "missing", map[string]string{"retention.ms": "1"}))

	// Grow all but topic-000 (asked to shrink) and topic-001 (already at 2).
	total := func(i int) int32 {
		switch i {
		case 0:
			return 1
		case 1:
			return 2
		}
		return 4
	}
	rc.reset()
	concurrently(len(ask), func(i int) { errs[i] = b.AddPartitions(ctx, ask[i], total(i)) })
	if got := counts(rc); !reflect.DeepEqual(got, map[string]int{"Metadata": 1, "CreatePartitions": 1}) {
		t.Errorf("31 batched partition increases sent %v, want one Metadata and one CreatePartitions", got)
	}
	sameError(t, "shrink", errs[0], a.AddPartitions(ctx, "topic-000", 1))
	sameError(t, "grow a missing topic", errs[30], a.AddPartitions(ctx, "missing", 4))
	got, err := a.DescribeTopics(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range names {
		if i > 0 && errs[i] != nil {
			t.Errorf("grow %s: %v", n, errs[i])
		}
		want := max(total(i), 2)
		if got[n].Partitions != want || got[n].Configs["retention.ms"] != fmt.Sprint(5000+i) {
			t.Errorf("%s: %+v, want %d partitions", n, got[n], want)
		}
	}
}

// TestABatchOutlivesACallerWhoGaveUp: a caller whose context ends gets its context's error at once;
// its batch-mates' request goes on and answers them.
func TestABatchOutlivesACallerWhoGaveUp(t *testing.T) {
	c := newCluster(t, seedTopics(1, "a", "b"))
	a, _ := newAdmin(t, plainConn(c))
	ctx := ctxT(t)
	if err := a.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	clk := newFakeClock()
	b := kafka.NewBatching(a.(kafka.BatchAdmin), kafka.BatchOptions{Window: testWindow, Clock: clk})
	rc := countRequests(c, batchKeys...)
	quitter, quit := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := b.DescribeTopics(quitter, "a")
		gaveUp <- err
	}()
	stayed := make(chan map[string]kafka.TopicInfo, 1)
	go func() {
		got, err := b.DescribeTopics(ctx, "b")
		if err != nil {
			t.Errorf("the caller who stayed: %v", err)
		}
		stayed <- got
	}()
	g := gomega.NewWithT(t)
	g.Eventually(b.Queued).Should(gomega.Equal(2))
	quit()
	err := <-gaveUp
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the caller who gave up: %v, want its context's error", err)
	}
	clk.Step(testWindow)
	if got := <-stayed; !got["b"].Exists {
		t.Errorf("the caller who stayed: %+v", got)
	}
	if got := counts(rc); !reflect.DeepEqual(got, map[string]int{"Metadata": 1, "DescribeConfigs": 1}) {
		t.Errorf("sent %v", got)
	}
}
