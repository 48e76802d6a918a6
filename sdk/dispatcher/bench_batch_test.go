package dispatcher_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// The cost model of costSink: every request costs perRequest, every record in it perRecord more.
const (
	perRequest = 2 * time.Millisecond
	perRecord  = 20 * time.Microsecond
)

// costSink answers one record per request (204) and batch documents (a success per record), after
// sleeping its cost model: the sleep stands for the sink's own work (a round trip, a database
// write) and takes no CPU, so that the runs compare how well each loop overlaps that cost.
type costSink struct {
	*httptest.Server
	records  atomic.Int64 // records answered with success
	mu       sync.Mutex   // guards first and last
	first    time.Time    // arrival of the first request since reset
	last     time.Time    // answer of the last request since reset
	notify   chan struct{}
	badBatch atomic.Int64 // batch requests the sink could not parse
}

func newCostSink(tb testing.TB) *costSink {
	s := &costSink{notify: make(chan struct{}, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		s.mu.Lock()
		if s.first.IsZero() {
			s.first = arrived
		}
		s.mu.Unlock()
		n := 1
		var results []batch.Result
		if r.Header.Get("Content-Type") == batch.MediaType {
			req, err := batch.ParseRequest(r, 64<<20)
			if err != nil {
				s.badBatch.Add(1)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			n = len(req.Records)
			results = make([]batch.Result, n)
			for i := range req.Records {
				results[i] = batch.Success(req.Records[i].ID)
			}
		} else {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		time.Sleep(perRequest + time.Duration(n)*perRecord) // the cost model
		if results != nil {
			_ = batch.WriteResults(w, results)
		} else {
			w.WriteHeader(http.StatusNoContent)
		}
		s.mu.Lock()
		s.last = time.Now()
		s.mu.Unlock()
		s.records.Add(int64(n))
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}))
	tb.Cleanup(s.Close)
	return s
}

// run runs loop until the sink answered n more records and returns the time from the first
// request's arrival to the last answer (the loops' start-up, a group join, is left out of all three
// alike), the CPU time of the whole process and its allocations per record.
func (s *costSink) run(tb testing.TB, n int, loop func(ctx context.Context)) (time.Duration, time.Duration, float64) {
	tb.Helper()
	runtime.GC()
	s.mu.Lock()
	s.first, s.last = time.Time{}, time.Time{}
	s.mu.Unlock()
	want := s.records.Load() + int64(n)
	m0, c0 := mallocs(), cpuTime()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { loop(ctx); close(done) }()
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for s.records.Load() < want {
		select {
		case <-s.notify:
		case <-deadline.C:
			tb.Fatalf("sink: %d of %d records answered", s.records.Load()-want+int64(n), n)
		}
	}
	cpu, allocs := cpuTime()-c0, float64(mallocs()-m0)/float64(n)
	cancel()
	<-done
	if s.badBatch.Load() > 0 {
		tb.Fatalf("the sink refused %d batch requests", s.badBatch.Load())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last.Sub(s.first), cpu, allocs
}

// bareBatchLoop is the baseline of batch delivery: a plain franz-go group consumer that, per
// partition of each poll (one goroutine each, in order, as the dispatcher's Ordered mode), POSTs the
// fetched records in batch documents of up to size records, reads each answer with
// batch.ParseResponse, and commits after the poll.
func bareBatchLoop(ctx context.Context, tb testing.TB, c *kfake.Cluster, group, topic, url string, size int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(), kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.CloseAllowingRebalance()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 100
	hc := &http.Client{Transport: tr}
	post := func(rs []*kgo.Record) {
		recs := make([]batch.Record, len(rs))
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = strconv.Itoa(i)
			recs[i] = batch.Record{ID: ids[i], IdempotencyKey: headers.IdempotencyKey(r.Topic, r.Partition, r.Offset), Attempt: 1,
				Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp, RawKey: r.Key, RawValue: r.Value}
		}
		var body bytes.Buffer
		if err := batch.EncodeRequest(&body, recs); err != nil {
			tb.Error(err)
			return
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, &body)
		req.Header.Set("Content-Type", batch.MediaType)
		resp, err := hc.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		res, err := batch.ParseResponse(resp.Body, ids, batch.ResponseLimit(len(ids)))
		if err != nil || len(res) != len(ids) {
			tb.Errorf("bare batch: %d results, %v", len(res), err)
		}
	}
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
				for rs := p.Records; len(rs) > 0; {
					k := min(size, len(rs))
					post(rs[:k])
					rs = rs[k:]
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

type batchThroughput struct {
	single, batched, bare          time.Duration // first request to last answer
	singleCPU, batchedCPU, bareCPU time.Duration
	batchedAllocs, bareAllocs      float64 // per record
}

// runBatchThroughput delivers nSingle records one request per record with the dispatcher, and
// nBatch records in batches of 100 with the dispatcher and with bareBatchLoop, all to one costSink
// on one broker, in the opposite order when reverse is set. Every loop is Ordered over the same
// partitions, so each has one request per partition in flight: the dispatcher's maxInFlight
// (records) is set so that it never is the limit (a batch takes as many slots as it has records).
func runBatchThroughput(tb testing.TB, nSingle, nBatch, partitions int, reverse bool) batchThroughput {
	const size = 100
	sink := newCostSink(tb)
	pol := simplePolicy(3, 100*time.Millisecond)
	single := dt.Config(nil, "single", "single.src", "single.dlq", pol, sink.URL)
	batched := dt.Config(nil, "batched", "batched.src", "batched.dlq", pol, sink.URL)
	batched.Delivery.MaxInFlight = int32(partitions * size)
	batched.Delivery.MaxBufferedRecords = 0
	batched.Delivery.Batch = &config.Batch{MaxRecords: size}
	batched.Default()
	topics := map[string]int32{"bare.src": int32(partitions), "single.src": int32(partitions), "batched.src": int32(partitions),
		"single.dlq": 1, "batched.dlq": 1}
	for _, cfg := range []*config.Config{single, batched} {
		for _, t := range cfg.Topics.Retries.Names() {
			topics[t] = int32(partitions)
		}
	}
	c := dt.Cluster(tb, topics)
	prod := dt.Client(tb, c, kgo.ProducerLinger(5*time.Millisecond))
	value := bytes.Repeat([]byte("v"), 100)
	produceN(tb, prod, "single.src", nSingle, value)
	produceN(tb, prod, "batched.src", nBatch, value)
	produceN(tb, prod, "bare.src", nBatch, value)
	engine := func(cfg *config.Config) func(ctx context.Context) {
		cfg.Kafka.BootstrapServers = c.ListenAddrs()
		if err := cfg.Validate(); err != nil {
			tb.Fatalf("config: %v", err)
		}
		return func(ctx context.Context) {
			h := dispatcher.NewHTTPSink(sink.URL, int(cfg.Delivery.MaxInFlight))
			o := dispatcher.Options{Config: cfg, Handler: h}
			if cfg.Delivery.Batch != nil {
				o.BatchHandler = h
			}
			e, err := dispatcher.New(o)
			if err != nil {
				tb.Error(err)
				return
			}
			_ = e.Run(ctx)
		}
	}
	var res batchThroughput
	runs := []func(){
		func() { res.single, res.singleCPU, _ = sink.run(tb, nSingle, engine(single)) },
		func() { res.batched, res.batchedCPU, res.batchedAllocs = sink.run(tb, nBatch, engine(batched)) },
		func() {
			res.bare, res.bareCPU, res.bareAllocs = sink.run(tb, nBatch, func(ctx context.Context) {
				bareBatchLoop(ctx, tb, c, "bare", "bare.src", sink.URL, size)
			})
		},
	}
	if reverse {
		for i, j := 0, len(runs)-1; i < j; i, j = i+1, j-1 {
			runs[i], runs[j] = runs[j], runs[i]
		}
	}
	for _, run := range runs {
		run()
	}
	return res
}

// BenchmarkBatchThroughput compares, in one run and against one sink costing 2 ms per request plus
// 20 µs per record, the dispatcher delivering one request per record, the dispatcher delivering
// batches of 100 (delivery.batch, the HTTP sink's batch POST), and a bare franz-go loop posting the
// same batches. Targets: ratio_batch/single >= 5, ratio_batch/bare >= 0.9.
func BenchmarkBatchThroughput(b *testing.B) {
	const nSingle, nBatch, partitions = 2000, 40000, 4
	var sum batchThroughput
	for i := range b.N {
		r := runBatchThroughput(b, nSingle, nBatch, partitions, i%2 == 1)
		sum.single += r.single
		sum.batched += r.batched
		sum.bare += r.bare
		sum.singleCPU += r.singleCPU
		sum.batchedCPU += r.batchedCPU
		sum.bareCPU += r.bareCPU
		sum.batchedAllocs += r.batchedAllocs
		sum.bareAllocs += r.bareAllocs
	}
	singleRate := float64(nSingle*b.N) / sum.single.Seconds()
	batchRate := float64(nBatch*b.N) / sum.batched.Seconds()
	bareRate := float64(nBatch*b.N) / sum.bare.Seconds()
	b.ReportMetric(singleRate, "single_records/s")
	b.ReportMetric(batchRate, "batch_records/s")
	b.ReportMetric(bareRate, "bare_batch_records/s")
	b.ReportMetric(batchRate/singleRate, "ratio_batch/single")
	b.ReportMetric(batchRate/bareRate, "ratio_batch/bare")
	b.ReportMetric(sum.batchedAllocs/float64(b.N), "batch_allocs/record")
	b.ReportMetric(sum.bareAllocs/float64(b.N), "bare_allocs/record")
	b.ReportMetric(float64(sum.singleCPU.Microseconds())/float64(nSingle*b.N), "single_cpu_us/record")
	b.ReportMetric(float64(sum.batchedCPU.Microseconds())/float64(nBatch*b.N), "batch_cpu_us/record")
	b.ReportMetric(float64(sum.bareCPU.Microseconds())/float64(nBatch*b.N), "bare_cpu_us/record")
}
