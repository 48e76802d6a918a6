package controllers

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkastats"
)

// refreshKeys are the Kafka requests a status refresh may send.
var refreshKeys = []kmsg.Key{kmsg.ApiVersions, kmsg.Metadata, kmsg.FindCoordinator, kmsg.ListOffsets, kmsg.OffsetFetch, kmsg.Fetch}

// refreshBounds are the most requests of each kind one refresh of every queue and pipeline of a
// connection may send, whatever their number: one ListOffsets round (start and end offsets: two
// requests on one broker) and its Metadata request, one OffsetFetch round, and one scan (a new
// client: an ApiVersions request on each of its connections, a Metadata request, and the Fetch
// requests the new records need: each asks for every partition, so their number follows the bytes
// to read (up to 50 MB a response) and how the client paces its fetches, not the number of topics;
// measured: 2 at 50 and at 300 topics, 3 to 5 at 2,500, including the fetches the client has in
// flight when the scan ends).
var refreshBounds = map[kmsg.Key]int64{
	kmsg.ApiVersions: 4, kmsg.Metadata: 3, kmsg.FindCoordinator: 0, kmsg.ListOffsets: 2, kmsg.OffsetFetch: 1, kmsg.Fetch: 8,
}

// liveScale is a connection with queues DeadLetterQueues (3 partitions each) and pipelines
// ConsumerPipelines (a source and 3 retry tiers of 3 partitions each, a consumer group) on a kfake
// broker, refreshed through the live figures code as their reconciles would.
type liveScale struct {
	tb        testing.TB
	cluster   *kfake.Cluster
	factory   *franz.Factory
	admin     kafka.Admin
	conn      kafka.Connection
	clock     *clocktesting.FakePassiveClock
	offsets   *kafkastats.Offsets
	commits   *kafkastats.Commits
	tallies   *kafkastats.Tallies
	ref       *kadm.Client
	refClient *kgo.Client
	queues    int
	pipelines int

	mu       sync.Mutex
	requests map[kmsg.Key]int64
	produced int // dead letters produced per queue so far
}

const liveScaleInterval = 30 * time.Second

func newLiveScale(tb testing.TB, queues, pipelines int) *liveScale {
	tb.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	s := &liveScale{tb: tb, cluster: c, queues: queues, pipelines: pipelines, requests: map[kmsg.Key]int64{},
		clock: clocktesting.NewFakePassiveClock(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))}
	for _, k := range refreshKeys {
		c.ControlKey(int16(k), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			s.mu.Lock()
			s.requests[k]++
			s.mu.Unlock()
			return nil, nil, false
		})
	}
	s.refClient, err = kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(1_000_000))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.refClient.Close)
	s.ref = kadm.NewClient(s.refClient)
	ctx := context.Background()
	var topics []string
	for i := range queues {
		topics = append(topics, s.queueTopic(i))
	}
	for i := range pipelines {
		topics = append(topics, s.pipelineTopics(i)...)
	}
	for chunk := range slicesChunk(topics, 500) {
		resp, err := s.ref.CreateTopics(ctx, 3, 1, nil, chunk...)
		if err != nil {
			tb.Fatal(err)
		}
		if err := resp.Error(); err != nil {
			tb.Fatal(err)
		}
	}
	s.factory = franz.NewFactory(franz.WithRequestTimeout(20 * time.Second))
	tb.Cleanup(s.factory.Close)
	s.conn = kafka.Connection{BootstrapServers: c.ListenAddrs()}
	if s.admin, err = s.factory.Admin(ctx, s.conn); err != nil {
		tb.Fatal(err)
	}
	s.offsets = kafkastats.NewOffsets(s.clock)
	s.commits = kafkastats.NewCommits(s.clock)
	s.tallies = kafkastats.NewTallies(s.offsets, s.factory)
	return s
}

func slicesChunk(s []string, n int) func(func([]string) bool) {
	return func(yield func([]string) bool) {
		for i := 0; i < len(s); i += n {
			if !yield(s[i:min(i+n, len(s))]) {
				return
			}
		}
	}
}

func (s *liveScale) queueTopic(i int) string { return fmt.Sprintf("scale.dlq.%03d", i) }

func (s *liveScale) pipelineTopics(i int) []string {
	src := fmt.Sprintf("scale.src.%03d", i)
	return []string{src, src + ".retry.1", src + ".retry.2", src + ".retry.3"}
}

// produce writes n dead letters to every queue (one per partition in turn) and n records to every
// pipeline's source, and has every group commit all but the last record of partition 0.
func (s *liveScale) produce(n int) {
	s.tb.Helper()
	ctx := context.Background()
	var rs []*kgo.Record
	for i := range s.queues {
		for k := range n {
			rs = append(rs, &kgo.Record{Topic: s.queueTopic(i), Partition: int32((s.produced + k) % 3), Value: []byte("x"),
				Headers: []kgo.RecordHeader{{Key: kafkastats.HeaderReason, Value: []byte("max_retries_exceeded")},
					{Key: kafkastats.HeaderPipeline, Value: []byte(fmt.Sprintf("ns/cpl-%03d", i))}}})
		}
	}
	for i := range s.pipelines {
		for range n {
			rs = append(rs, &kgo.Record{Topic: s.pipelineTopics(i)[0], Partition: 0, Value: []byte("x")})
		}
	}
	if err := s.refClient.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		s.tb.Fatal(err)
	}
	s.produced += n
	for i := range s.pipelines {
		os := make(kadm.Offsets)
		os.Add(kadm.Offset{Topic: s.pipelineTopics(i)[0], Partition: 0, At: int64(s.produced - 1), LeaderEpoch: -1})
		if err := s.ref.CommitAllOffsets(ctx, s.group(i), os); err != nil {
			s.tb.Fatal(err)
		}
	}
}

func (s *liveScale) group(i int) string { return fmt.Sprintf("ns.cpl-%03d", i) }

// refreshResult is what one refresh of everything saw.
type refreshResult struct {
	took     time.Duration
	requests map[kmsg.Key]int64
	held     []int64 // dead letters tallied per queue
	lag      []int64 // consumer lag per pipeline
}

// refresh refreshes every queue and pipeline once, one interval after the last refresh, with
// DefaultMaxConcurrentReconciles workers per kind as the manager runs them.
func (s *liveScale) refresh() refreshResult {
	s.tb.Helper()
	ctx := context.Background()
	s.clock.SetTime(s.clock.Now().Add(liveScaleInterval))
	s.mu.Lock()
	s.requests = map[kmsg.Key]int64{}
	s.mu.Unlock()
	res := refreshResult{held: make([]int64, s.queues), lag: make([]int64, s.pipelines)}
	errs := make(chan error, s.queues+s.pipelines)
	var wg sync.WaitGroup
	work := func(n int, fn func(int) error) {
		next := make(chan int)
		for range DefaultMaxConcurrentReconciles {
			wg.Go(func() {
				for i := range next {
					if err := fn(i); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Go(func() {
			for i := range n {
				next <- i
			}
			close(next)
		})
	}
	start := time.Now()
	work(s.queues, func(i int) error {
		who := types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("dlq-%03d", i)}
		got, at, err := s.offsets.Get(ctx, s.admin, "conn", dlqOwner(who), []string{s.queueTopic(i)}, liveScaleInterval)
		if err != nil {
			return err
		}
		po := got[s.queueTopic(i)]
		b, err := s.tallies.Breakdown(ctx, s.conn, "conn", dlqOwner(who), s.queueTopic(i), po, at, liveScaleInterval)
		if err != nil {
			return err
		}
		if b.Messages != kafkastats.CountMessages(po) {
			return fmt.Errorf("queue %d: %d tallied, %d held", i, b.Messages, kafkastats.CountMessages(po))
		}
		res.held[i] = b.Messages
		return nil
	})
	work(s.pipelines, func(i int) error {
		member := pipelineOwner(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("cpl-%03d", i)})
		topics := s.pipelineTopics(i)
		offs, _, err := s.offsets.Get(ctx, s.admin, "conn", member, topics, liveScaleInterval)
		if err != nil {
			return err
		}
		commits, err := s.commits.Get(ctx, s.admin, "conn", member, s.group(i), liveScaleInterval)
		if err != nil {
			return err
		}
		res.lag[i] = kafkastats.GroupLag(offs[topics[0]], commits.Topics[topics[0]])
		return nil
	})
	wg.Wait()
	res.took = time.Since(start)
	close(errs)
	for err := range errs {
		s.tb.Fatal(err)
	}
	s.mu.Lock()
	res.requests = s.requests
	s.mu.Unlock()
	return res
}

// warmUp refreshes until every queue and pipeline took part in a round (the first refresh of a new
// resource reads its own topics alone, as a reconcile of a new resource does).
func (s *liveScale) warmUp() {
	s.refresh()
	s.refresh()
}

func describeRequests(m map[kmsg.Key]int64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k.Name(), v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func checkRefresh(tb testing.TB, s *liveScale, r refreshResult, wantHeld, wantLag int64) {
	tb.Helper()
	for k, most := range refreshBounds {
		if r.requests[k] > most {
			tb.Errorf("%d queues and %d pipelines: %d %s requests in one refresh, want at most %d (%s)",
				s.queues, s.pipelines, r.requests[k], k.Name(), most, describeRequests(r.requests))
		}
	}
	for i, h := range r.held {
		if h != wantHeld {
			tb.Fatalf("queue %d: %d dead letters tallied, want %d", i, h, wantHeld)
		}
	}
	for i, l := range r.lag {
		if l != wantLag {
			tb.Fatalf("pipeline %d: lag %d, want %d", i, l, wantLag)
		}
	}
}

// TestRefreshCostsConstantKafkaRequests refreshes every queue and pipeline of a connection, at two
// scales, and counts the Kafka requests: the same small number at both, so O(1) in the number of
// topics (BenchmarkRefresh500DLQsAnd500Pipelines runs it at 2,500 topics). A refresh with new dead
// letters reads them in one scan; one with nothing new reads nothing.
func TestRefreshCostsConstantKafkaRequests(t *testing.T) {
	var perScale []map[kmsg.Key]int64
	for _, n := range []int{10, 60} {
		s := newLiveScale(t, n, n)
		s.produce(2)
		s.warmUp()

		s.produce(3)
		scans, scanned := s.tallies.Scans()
		r := s.refresh()
		scansNow, scannedNow := s.tallies.Scans()
		if got := scansNow - scans; got != 1 {
			t.Errorf("%d scans for one refresh, want 1 for all queues", got)
		}
		if got := scannedNow - scanned; got != int64(3*n) {
			t.Errorf("%d records read, want the %d new ones", got, 3*n)
		}
		t.Logf("%d queues and %d pipelines (%d topics), new records everywhere: one refresh in %v with %s",
			n, n, n+4*n, r.took.Round(time.Millisecond), describeRequests(r.requests))
		checkRefresh(t, s, r, 5, 1)
		if r.requests[kmsg.Fetch] == 0 {
			t.Errorf("new dead letters were not read")
		}
		perScale = append(perScale, r.requests)

		scans, _ = s.tallies.Scans()
		r = s.refresh()
		if got, _ := s.tallies.Scans(); got-scans != 0 {
			t.Errorf("%d scans with nothing new, want none", got)
		}
		t.Logf("%d queues and %d pipelines, nothing new: one refresh in %v with %s", n, n, r.took.Round(time.Millisecond), describeRequests(r.requests))
		checkRefresh(t, s, r, 5, 1)
		if r.requests[kmsg.Fetch] != 0 || r.requests[kmsg.ApiVersions] != 0 {
			t.Errorf("a refresh with nothing new read records: %s", describeRequests(r.requests))
		}
	}
	for _, k := range []kmsg.Key{kmsg.ListOffsets, kmsg.OffsetFetch, kmsg.Metadata} {
		if perScale[0][k] != perScale[1][k] {
			t.Errorf("%s requests grew with the number of topics: %d then %d", k.Name(), perScale[0][k], perScale[1][k])
		}
	}
}

// BenchmarkRefresh500DLQsAnd500Pipelines refreshes the live figures of 500 DeadLetterQueues and 500
// ConsumerPipelines (2,500 topics, 7,500 partitions) on one kfake connection, with new dead letters
// in every queue and new records in every source, and counts the Kafka requests of one refresh. Run
// it with
//
//	go test ./controllers/ -run '^$' -bench BenchmarkRefresh500DLQsAnd500Pipelines -benchtime 5x
func BenchmarkRefresh500DLQsAnd500Pipelines(b *testing.B) {
	s := newLiveScale(b, 500, 500)
	s.produce(2)
	s.warmUp()
	var worst time.Duration
	var last refreshResult
	for b.Loop() {
		b.StopTimer()
		s.produce(1)
		b.StartTimer()
		last = s.refresh()
		worst = max(worst, last.took)
		checkRefresh(b, s, last, int64(s.produced), 1)
	}
	b.Logf("one refresh of 500 queues and 500 pipelines (2,500 topics): %s; slowest %v", describeRequests(last.requests), worst.Round(time.Millisecond))
	if worst > 2*time.Second {
		b.Errorf("a refresh took %v, want under 2s", worst)
	}
	var total int64
	for _, k := range refreshKeys {
		total += last.requests[k]
		b.ReportMetric(float64(last.requests[k]), k.Name()+"/refresh")
	}
	b.ReportMetric(float64(total), "kafka-requests/refresh")
	b.ReportMetric(worst.Seconds(), "s-slowest-refresh")
}
