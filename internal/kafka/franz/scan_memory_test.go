package franz

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/sdk/headers"
)

// The label values of the dead letters the memory tests write: several of each, as a busy queue
// fed by a few pipelines holds.
var (
	dlReasons   = []string{headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable, headers.ReasonDeadlineExceeded, headers.ReasonUndeliverable, headers.ReasonMalformed}
	dlErrTypes  = []string{"HTTP5xx", "Timeout", "ConnectionRefused", "HTTP4xx", headers.ErrorTypeDeadlineExceeded, headers.ErrorTypePayloadTooLarge, headers.ErrorTypeMalformedHeaders}
	dlPipelines = []string{"orders-billing", "orders-shipping", "payments-ledger", "users-mailer"}
)

// deadLetter is dead letter number i of a queue, with the headers the dispatcher writes
// (sdk/dispatcher/produce.go: the source record's headers, outHeaders, the group and
// pipeline, failureHeaders, the reason) and a value of valueLen bytes (random length in
// [valueLen/2, valueLen] when vary).
func deadLetter(rng *rand.Rand, topic string, partition int32, i int, valueLen int, vary bool) *kgo.Record {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Millisecond)
	pipeline := dlPipelines[i%len(dlPipelines)]
	hs := []kgo.RecordHeader{
		{Key: "traceparent", Value: fmt.Appendf(nil, "00-%016x%016x-%016x-01", rng.Uint64(), rng.Uint64(), rng.Uint64())},
		{Key: "content-type", Value: []byte("application/json")},
		hdr(headers.OriginalTopic, pipeline+".events"),
		hdr(headers.OriginalPartition, strconv.Itoa(i%12)),
		hdr(headers.OriginalOffset, strconv.Itoa(1_000_000+i)),
		hdr(headers.OriginalTimestamp, headers.FormatTime(now.Add(-time.Hour))),
		hdr(headers.ConsumerGroup, "retryops-"+pipeline),
		hdr(headers.Pipeline, pipeline),
		hdr(headers.Attempts, strconv.Itoa(1+i%8)),
		hdr(headers.FirstFailure, headers.FormatTime(now.Add(-10*time.Minute))),
		hdr(headers.LastFailure, headers.FormatTime(now)),
		hdr(headers.ErrorType, dlErrTypes[(i/3)%len(dlErrTypes)]),
		hdr(headers.ErrorMessage, fmt.Sprintf("POST https://%s.internal.example/v1/hooks: 503 Service Unavailable: upstream connect error or disconnect/reset before headers. reset reason: connection termination (request %d)", pipeline, i)),
		hdr(headers.HTTPStatus, "503"),
		hdr(headers.Reason, dlReasons[(i/7)%len(dlReasons)]),
	}
	n := valueLen
	if vary {
		n = valueLen/2 + rng.IntN(valueLen/2+1)
	}
	value := make([]byte, n)
	const alphabet = `{"id":,"amount":"currency":EURUSD"items":[]}0123456789abcdefghijklmnopqrstuvwxyz`
	for j := range value {
		value[j] = alphabet[rng.IntN(len(alphabet))]
	}
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte(strconv.Itoa(i)), Value: value, Headers: hs}
}

func hdr(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

// produceDeadLetters creates topic with partitions partitions on the broker at addr and writes n dead
// letters to it, spread evenly, with the dispatcher's producer defaults.
func produceDeadLetters(tb testing.TB, addr, topic string, partitions int32, n, valueLen int, vary bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(1<<20))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, 1, nil, topic); err != nil {
		tb.Fatalf("create %s: %v", topic, err)
	}
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // test data
	var (
		mu       sync.Mutex
		firstErr error
	)
	for i := range n {
		cl.Produce(ctx, deadLetter(rng, topic, int32(i)%partitions, i, valueLen, vary), func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		tb.Fatal(err)
	}
	if firstErr != nil {
		tb.Fatalf("produce to %s: %v", topic, firstErr)
	}
}

// heapSampler records the largest heap ("/memory/classes/heap/objects:bytes": live objects and
// garbage not yet swept, what the process must hold) seen every interval until stop.
type heapSampler struct {
	stopc chan struct{}
	done  chan struct{}
	peak  uint64
}

const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: heapObjectsMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func sampleHeap(every time.Duration) *heapSampler {
	h := &heapSampler{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		s := []metrics.Sample{{Name: heapObjectsMetric}}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			metrics.Read(s)
			h.peak = max(h.peak, s[0].Value.Uint64())
			select {
			case <-h.stopc:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

// stop ends the sampling and returns the peak.
func (h *heapSampler) stop() uint64 {
	close(h.stopc)
	<-h.done
	return h.peak
}

const mib = 1 << 20

// tallyFromScratch brings a fresh tally of topic up to its end offsets through kafkastats.Tallies
// and the factory's Scanner, the path of a DeadLetterQueue's first refresh (and of the refreshes
// that follow when one scan's time is not enough), and returns the breakdown, the number of scans
// and the tallies (to keep them live while the heap is measured).
func tallyFromScratch(tb testing.TB, f *Factory, conn kafka.Connection, topic string, want int64) (kafkastats.Breakdown, int64, *kafkastats.Tallies) {
	tb.Helper()
	ctx := context.Background()
	admin, err := f.Admin(ctx, conn)
	if err != nil {
		tb.Fatal(err)
	}
	offs, err := admin.ListOffsets(ctx, topic)
	if err != nil {
		tb.Fatal(err)
	}
	tallies := kafkastats.NewTallies(kafkastats.NewOffsets(clock.RealClock{}), f)
	var b kafkastats.Breakdown
	gomega.NewWithT(tb).Eventually(func() int64 {
		b, err = tallies.Breakdown(ctx, conn, conn.Key(), "DeadLetterQueue/bench/dlq", topic, offs[topic], time.Now(), time.Minute)
		return b.Messages
	}, 10*time.Minute, time.Millisecond).Should(gomega.Equal(want), func() string { return fmt.Sprintf("tallied records (last error: %v)", err) })
	scans, _ := tallies.Scans()
	return b, scans, tallies
}

// checkBreakdown checks the counts by label of n dead letters written by deadLetter.
func checkBreakdown(tb testing.TB, b kafkastats.Breakdown, n int) {
	tb.Helper()
	want := map[string]int64{}
	for i := range n {
		want["r/"+dlReasons[(i/7)%len(dlReasons)]]++
		want["e/"+dlErrTypes[(i/3)%len(dlErrTypes)]]++
		want["p/"+dlPipelines[i%len(dlPipelines)]]++
	}
	got := map[string]int64{}
	for _, c := range b.Reasons {
		got["r/"+c.Name] = c.Count
	}
	for _, c := range b.ErrorTypes {
		got["e/"+c.Name] = c.Count
	}
	for _, c := range b.Pipelines {
		got["p/"+c.Name] = c.Count
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		tb.Fatalf("breakdown:\n got %v\nwant %v", got, want)
	}
}

// BenchmarkTallyFromScratch tallies a dead letter queue of 1,000,000 dead letters (the dispatcher's
// headers, values of 200 to 400 bytes, three partitions) from scratch, through kafkastats.Tallies and
// the franz Scanner, against a kfake broker in another process, and reports the peak heap of this
// process while it runs (peak_heap_MiB, sampled every 2ms) and the records tallied per second.
//
//	go test ./internal/kafka/franz -run '^$' -bench TallyFromScratch -benchtime 1x
func BenchmarkTallyFromScratch(b *testing.B) {
	const (
		n     = 1_000_000
		topic = "orders-dlq"
	)
	addr := startBrokerProcess(b)
	setup := time.Now()
	produceDeadLetters(b, addr, topic, 3, n, 400, true)
	b.Logf("setup: %d dead letters produced to the broker process in %s", n, time.Since(setup).Round(time.Millisecond))

	f := NewFactory(WithRequestTimeout(30 * time.Second))
	defer f.Close()
	conn := kafka.Connection{BootstrapServers: []string{addr}, ClientID: "bench"}
	var (
		peak      uint64
		scans     int64
		breakdown kafkastats.Breakdown
	)
	runtime.GC()
	base := heapObjects()
	start := time.Now()
	for b.Loop() {
		runtime.GC()
		h := sampleHeap(2 * time.Millisecond)
		var t *kafkastats.Tallies
		breakdown, scans, t = tallyFromScratch(b, f, conn, topic, n)
		peak = max(peak, h.stop())
		runtime.KeepAlive(t)
	}
	elapsed := time.Since(start)
	checkBreakdown(b, breakdown, n)
	b.ReportMetric(float64(peak)/mib, "peak_heap_MiB")
	b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "records/s")
	b.ReportMetric(float64(scans), "scans")
	b.Logf("heap before %.1f MiB, peak %.1f MiB; %d records in %s per tally (%d scans)",
		float64(base)/mib, float64(peak)/mib, n, (elapsed / time.Duration(b.N)).Round(time.Millisecond), scans)
}

// TestScanHeapFollowsTheFetchBoundNotTheTopic scans and tallies 20,000 dead letters of 8 KiB (156
// MiB of records in twelve partitions, on a broker in another process) and checks that the heap
// grows by less than 32 fetches' worth (scanFetchMaxBytes each) while it runs: what a scan holds is
// its fetches (the one handed to the tally and the one read ahead, raw, decompressed and decoded,
// twice over for the collector's headroom), never the topic. With franz-go's default fetch sizes
// (up to 1 MiB per partition, 50 MiB per fetch, one fetch per broker read ahead) the heap grew by
// about 55 MiB here, and by more with more partitions; bounded, by 11 to 20 MiB.
func TestScanHeapFollowsTheFetchBoundNotTheTopic(t *testing.T) {
	const (
		n     = 20_000
		topic = "big-dlq"
		bound = 32 * scanFetchMaxBytes
	)
	addr := startBrokerProcess(t)
	produceDeadLetters(t, addr, topic, 12, n, 8<<10, false)
	f := NewFactory(WithRequestTimeout(30 * time.Second))
	defer f.Close()
	conn := kafka.Connection{BootstrapServers: []string{addr}, ClientID: "test"}
	admin, err := f.Admin(ctxT(t), conn)
	if err != nil {
		t.Fatal(err)
	}
	offs, err := admin.ListOffsets(ctxT(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	tally := kafkastats.NewTally()
	ranges := tally.Plan(offs[topic])

	runtime.GC()
	base := heapObjects()
	h := sampleHeap(time.Millisecond)
	err = f.Scan(ctxT(t), conn, map[string]map[int32]kafka.OffsetRange{topic: ranges}, tally.Add)
	peak := h.stop()
	if err != nil {
		t.Fatal(err)
	}
	b := tally.Breakdown(0)
	if b.Messages != n {
		t.Fatalf("tallied %d of %d records", b.Messages, n)
	}
	checkBreakdown(t, b, n)
	grew := peak - min(peak, base)
	t.Logf("heap %.1f MiB before the scan, %.1f MiB at most during it (+%.1f MiB; bound +%d MiB)",
		float64(base)/mib, float64(peak)/mib, float64(grew)/mib, bound/mib)
	if grew > bound {
		t.Fatalf("the scan of %d MiB of records grew the heap by %.1f MiB, more than %d MiB (32 fetches)",
			n*(8<<10)/mib, float64(grew)/mib, bound/mib)
	}
}
