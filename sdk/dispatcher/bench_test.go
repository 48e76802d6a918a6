package dispatcher_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
)

// benchSink is a light HTTP sink: it counts answers and records latencies, nothing else.
type benchSink struct {
	*httptest.Server
	work   time.Duration          // processing time of every request
	fail   func(body []byte) bool // answer 503 to the first attempt of these
	ok     atomic.Int64           // 2xx answers
	reqs   atomic.Int64           // all answers
	mu     sync.Mutex             // guards lat
	lat    []time.Duration        // for healthy records whose body starts with a send time
	notify chan struct{}
}

func newBenchSink(tb testing.TB, work time.Duration, fail func([]byte) bool) *benchSink {
	s := &benchSink{work: work, fail: fail, notify: make(chan struct{}, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if s.work > 0 {
			t := time.NewTimer(s.work) // the sink's own processing time
			<-t.C
		}
		s.reqs.Add(1)
		if s.fail != nil && s.fail(body) && r.Header.Get(headers.HTTPRetryAttempt) == "1" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if i := bytes.IndexByte(body, '|'); i > 0 {
			if ns, err := strconv.ParseInt(string(body[:i]), 10, 64); err == nil {
				d := time.Since(time.Unix(0, ns))
				s.mu.Lock()
				s.lat = append(s.lat, d)
				s.mu.Unlock()
			}
		}
		s.ok.Add(1)
		select {
		case s.notify <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	tb.Cleanup(s.Close)
	return s
}

func (s *benchSink) waitOK(tb testing.TB, n int64, timeout time.Duration) {
	tb.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for s.ok.Load() < n {
		select {
		case <-s.notify:
		case <-deadline.C:
			tb.Fatalf("sink: %d of %d delivered after %v", s.ok.Load(), n, timeout)
		}
	}
}

func (s *benchSink) latencies() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.lat)
	slices.Sort(out)
	return out
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q * float64(len(sorted)-1))
	return sorted[i]
}

func produceN(tb testing.TB, cl *kgo.Client, topic string, n int, value []byte) {
	tb.Helper()
	var wg sync.WaitGroup
	var ferr atomic.Value
	for i := range n {
		wg.Add(1)
		cl.Produce(context.Background(), &kgo.Record{Topic: topic, Key: []byte(strconv.Itoa(i)), Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				ferr.Store(err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err, ok := ferr.Load().(error); ok {
		tb.Fatal(err)
	}
}

// bareLoop is the baseline: a plain franz-go group consumer that POSTs every record and commits
// after each poll, one goroutine per partition so that partitions are delivered in parallel and in
// order, as the dispatcher's Ordered mode does. With sameRequest it sends the headers the
// dispatcher sends (key, idempotency key, coordinates, attempt), so that the comparison measures
// the loop and not the wire format; without, only the body.
func bareLoop(ctx context.Context, tb testing.TB, c *kfake.Cluster, group, topic, url string, conns int, sameRequest bool) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.CloseAllowingRebalance()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	hc := &http.Client{Transport: tr}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		var wg sync.WaitGroup
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, r := range p.Records {
					req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.Value))
					req.Header.Set("Content-Type", "application/octet-stream")
					if sameRequest {
						key := headers.IdempotencyKey(r.Topic, r.Partition, r.Offset)
						req.Header.Set(headers.HTTPKafkaKey, string(r.Key))
						req.Header.Set(headers.HTTPIdempotencyKey, key)
						req.Header.Set(headers.HTTPRetryAttempt, "1")
						req.Header.Set(headers.HTTPKafkaTopic, r.Topic)
						req.Header.Set(headers.HTTPKafkaPartition, strconv.Itoa(int(r.Partition)))
						req.Header.Set(headers.HTTPKafkaOffset, strconv.FormatInt(r.Offset, 10))
						req.Header.Set(headers.HTTPKafkaTimestamp, r.Timestamp.UTC().Format(time.RFC3339Nano))
						req.Header.Set(headers.HTTPDeliveredFrom, key)
					}
					resp, err := hc.Do(req)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		})
		wg.Wait()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil && ctx.Err() == nil {
			tb.Errorf("bare commit: %v", err)
		}
		cl.AllowRebalance()
	}
}

type throughput struct {
	bareMin, bare, ours                   time.Duration
	bareMinAllocs, bareAllocs, oursAllocs float64       // per record
	bareMinCPU, bareCPU, oursCPU          time.Duration // CPU time of the whole process (broker and sink included)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// runThroughput delivers n records three times on one broker and one sink: with the bare loop
// sending only the body, with the bare loop sending the dispatcher's request, and with the
// dispatcher (Ordered, the same partitions), in the opposite order when reverse is set. It returns
// the times, CPU times and allocations per record.
func runThroughput(tb testing.TB, n, partitions int, reverse bool) throughput {
	sink := newBenchSink(tb, 0, nil)
	pol := simplePolicy(3, 100*time.Millisecond)
	cfg := dt.Config(nil, "ours", "ours.src", "ours.dlq", pol, sink.URL)
	topics := map[string]int32{"bare0.src": int32(partitions), "bare.src": int32(partitions), "ours.src": int32(partitions), "ours.dlq": 1}
	for _, t := range cfg.Topics.Retries.Names() {
		topics[t] = int32(partitions)
	}
	c := dt.Cluster(tb, topics)
	cfg.Kafka.BootstrapServers = c.ListenAddrs()
	prod := dt.Client(tb, c, kgo.ProducerLinger(5*time.Millisecond))
	value := bytes.Repeat([]byte("v"), 100)
	for _, t := range []string{"bare0.src", "bare.src", "ours.src"} {
		produceN(tb, prod, t, n, value)
	}
	var res throughput
	measure := func(run func(ctx context.Context)) (time.Duration, float64, time.Duration) {
		runtime.GC()
		want := sink.ok.Load() + int64(n)
		m0, t0, c0 := mallocs(), time.Now(), cpuTime()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { run(ctx); close(done) }()
		sink.waitOK(tb, want, 2*time.Minute)
		d, a, cpu := time.Since(t0), float64(mallocs()-m0)/float64(n), cpuTime()-c0
		cancel()
		<-done
		return d, a, cpu
	}
	runs := []func(){
		func() {
			res.bareMin, res.bareMinAllocs, res.bareMinCPU = measure(func(ctx context.Context) { bareLoop(ctx, tb, c, "bare0", "bare0.src", sink.URL, 100, false) })
		},
		func() {
			res.bare, res.bareAllocs, res.bareCPU = measure(func(ctx context.Context) { bareLoop(ctx, tb, c, "bare", "bare.src", sink.URL, 100, true) })
		},
		func() {
			res.ours, res.oursAllocs, res.oursCPU = measure(func(ctx context.Context) {
				e, err := dispatcher.New(dispatcher.Options{Config: cfg, Handler: dispatcher.NewHTTPSink(sink.URL, 100)})
				if err != nil {
					tb.Error(err)
					return
				}
				_ = e.Run(ctx)
			})
		},
	}
	if reverse {
		slices.Reverse(runs)
	}
	for _, run := range runs {
		run()
	}
	return res
}

// BenchmarkThroughput compares the dispatcher with a bare franz-go consume -> POST -> commit loop
// on the same in-process broker and sink, in one run: records/s of each, the ratio ours/bare
// (target >= 0.9) and allocations per record of each (sink and broker included, the same for both).
func BenchmarkThroughput(b *testing.B) {
	const n, partitions = 20000, 4
	var sum throughput
	for i := range b.N {
		r := runThroughput(b, n, partitions, i%2 == 1)
		sum.bareMin += r.bareMin
		sum.bare += r.bare
		sum.ours += r.ours
		sum.bareMinCPU += r.bareMinCPU
		sum.bareCPU += r.bareCPU
		sum.oursCPU += r.oursCPU
		sum.bareMinAllocs += r.bareMinAllocs
		sum.bareAllocs += r.bareAllocs
		sum.oursAllocs += r.oursAllocs
	}
	records, runs := float64(n*b.N), float64(b.N)
	b.ReportMetric(records/sum.bareMin.Seconds(), "bare_body_only_records/s")
	b.ReportMetric(records/sum.bare.Seconds(), "bare_records/s")
	b.ReportMetric(records/sum.ours.Seconds(), "ours_records/s")
	b.ReportMetric(sum.bare.Seconds()/sum.ours.Seconds(), "ratio_ours/bare")
	b.ReportMetric(sum.bareMin.Seconds()/sum.ours.Seconds(), "ratio_ours/bare_body_only")
	b.ReportMetric(sum.bareMinAllocs/runs, "bare_body_only_allocs/record")
	b.ReportMetric(sum.bareAllocs/runs, "bare_allocs/record")
	b.ReportMetric(sum.oursAllocs/runs, "ours_allocs/record")
	b.ReportMetric(float64(sum.bareCPU.Microseconds())/records, "bare_cpu_us/record")
	b.ReportMetric(float64(sum.oursCPU.Microseconds())/records, "ours_cpu_us/record")
	b.ReportMetric(sum.bareCPU.Seconds()/sum.oursCPU.Seconds(), "cpu_ratio_bare/ours")
}

// throughputFloor is the least ratio of the dispatcher's records/s to the bare loop's (the same
// request) that TestThroughputAgainstBareLoop accepts: the benchmark's target is 0.9; the floor
// leaves room for a noisy machine while failing a dispatcher that lost half its rate. The race detector instruments the dispatcher's own code
// far more than the bare loop's, so under -race (how make test runs this package) the floor is
// raceThroughputFloor: a CI run measured 0.49 there on a loaded machine.
const throughputFloor, raceThroughputFloor = 0.5, 0.25

// TestThroughputAgainstBareLoop is BenchmarkThroughput with fewer records, run by default: it checks
// that all three loops deliver everything, logs the ratios and fails below throughputFloor.
// Under -short (make test-unit, which runs beside the operator module's tests) it skips: a ratio of
// two rates measured on a machine that busy says little.
func TestThroughputAgainstBareLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("a ratio of rates, measured beside other tests: make test runs it")
	}
	const n = 3000
	r := runThroughput(t, n, 4, false)
	floor := throughputFloor
	if raceEnabled {
		floor = raceThroughputFloor
	}
	defer func() {
		if ratio := r.bare.Seconds() / r.ours.Seconds(); ratio < floor {
			t.Errorf("the dispatcher delivered at %.2f times the bare loop's rate in the same run, below the floor %.2f", ratio, floor)
		}
	}()
	t.Logf("records/s: bare (body only) %.0f, bare (same request) %.0f, dispatcher %.0f; ratio ours/bare %.2f (body only %.2f); allocs/record %.0f, %.0f, %.0f; CPU us/record bare %.0f, dispatcher %.0f",
		n/r.bareMin.Seconds(), n/r.bare.Seconds(), n/r.ours.Seconds(), r.bare.Seconds()/r.ours.Seconds(), r.bareMin.Seconds()/r.ours.Seconds(),
		r.bareMinAllocs, r.bareAllocs, r.oursAllocs, float64(r.bareCPU.Microseconds())/n, float64(r.oursCPU.Microseconds())/n)
}

type holResult struct {
	healthy, baseline        []time.Duration // sorted latencies
	parked                   int64           // failing records not redelivered by the end
	healthySent, failingSent int
}

// runHOL produces at rate records/s for dur, first all healthy (the baseline), then with every
// fifth record failing its first delivery with a retry delay of failDelay, and returns the healthy
// records' delivery latencies in both runs. The failing records stay parked in the retry tier (the
// runs end before failDelay) while the healthy ones flow.
func runHOL(tb testing.TB, rate int, dur, work, failDelay time.Duration) holResult {
	var res holResult
	for run := range 2 {
		withFailures := run == 1
		sink := newBenchSink(tb, work, func(body []byte) bool { return bytes.HasSuffix(body, []byte("|f")) })
		pol := &policy.Spec{MaxAttempts: 2, Backoff: policy.Backoff{InitialDelay: dt.D(failDelay), Multiplier: "2", MaxDelay: dt.D(failDelay)},
			Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
				{Name: "transient", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"503"}}}}}
		group := "hol" + strconv.Itoa(run)
		p := newPipeline(tb, group, 4, pol, nil)
		p.cfg.Sink.URL = sink.URL
		r := start(tb, dispatcher.Options{Config: p.cfg})
		prod := dt.Client(tb, p.c, kgo.ProducerLinger(0))
		total := int(dur.Seconds() * float64(rate))
		interval := time.Second / time.Duration(rate)
		tick := time.NewTicker(interval)
		healthy := 0
		for i := range total {
			<-tick.C
			kind := "h"
			if withFailures && i%5 == 4 {
				kind = "f"
			} else {
				healthy++
			}
			v := strconv.FormatInt(time.Now().UnixNano(), 10) + "|" + kind
			prod.Produce(context.Background(), &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i)), Value: []byte(v)}, nil)
		}
		tick.Stop()
		sink.waitOK(tb, int64(healthy), time.Minute)
		if withFailures {
			dt.Eventually(tb, 10*time.Second, func() bool { return sink.reqs.Load()-sink.ok.Load() == int64(total-healthy) },
				"every failing record answered once")
			res.healthy = sink.latencies()
			res.healthySent, res.failingSent = healthy, total-healthy
			res.parked = sink.reqs.Load() - sink.ok.Load() // failed first attempts not yet retried
		} else {
			res.baseline = sink.latencies()
		}
		r.stop(tb)
	}
	return res
}

// BenchmarkNoHeadOfLineBlocking: 20% of the records fail with a 30 s retry delay (parked in the
// retry tier for the whole run) while healthy records flow; it reports the healthy records' p99
// delivery latency against an all-healthy run (target ratio <= 1.5). The sink takes 2 ms per
// request and records arrive at 400/s over 4 partitions (Ordered).
func BenchmarkNoHeadOfLineBlocking(b *testing.B) {
	var ratio, p99, p99Base float64
	for range b.N {
		r := runHOL(b, 400, 5*time.Second, 2*time.Millisecond, 30*time.Second)
		p, pb := quantile(r.healthy, 0.99), quantile(r.baseline, 0.99)
		ratio += p.Seconds() / pb.Seconds()
		p99 += p.Seconds() * 1000
		p99Base += pb.Seconds() * 1000
		b.Logf("healthy %d, parked %d of %d failing; p50 %v vs %v, p99 %v vs %v, max %v vs %v",
			len(r.healthy), r.parked, r.failingSent, quantile(r.healthy, .5), quantile(r.baseline, .5), p, pb,
			r.healthy[len(r.healthy)-1], r.baseline[len(r.baseline)-1])
	}
	b.ReportMetric(p99Base/float64(b.N), "p99_all_healthy_ms")
	b.ReportMetric(p99/float64(b.N), "p99_with_20%_failing_ms")
	b.ReportMetric(ratio/float64(b.N), "p99_ratio")
}

// TestNoHeadOfLineBlocking is the benchmark's scenario at a smaller scale, run by default: with 20%
// of records parked in the retry tier for 30 s, every healthy record is still delivered, the failing
// ones stay parked, and no healthy record waits anywhere near the retry delay.
func TestNoHeadOfLineBlocking(t *testing.T) {
	r := runHOL(t, 200, time.Second, time.Millisecond, 30*time.Second)
	p, pb := quantile(r.healthy, 0.99), quantile(r.baseline, 0.99)
	t.Logf("healthy p99 %v (all-healthy run %v, ratio %.2f), max %v; %d failing records parked",
		p, pb, p.Seconds()/pb.Seconds(), r.healthy[len(r.healthy)-1], r.parked)
	if len(r.healthy) != r.healthySent {
		t.Errorf("%d healthy records delivered, %d sent", len(r.healthy), r.healthySent)
	}
	if r.parked != int64(r.failingSent) {
		t.Errorf("%d failing records parked, %d sent", r.parked, r.failingSent)
	}
	if max := r.healthy[len(r.healthy)-1]; max > 5*time.Second {
		t.Errorf("a healthy record waited %v: head-of-line blocking behind the parked records", max)
	}
}
