package dlqapi_test

import (
	"context"
	"sync"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	"k8s.io/apimachinery/pkg/labels"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqapi"
)

const benchTotal = 100000

var (
	benchOnce  sync.Once
	benchKafka *kafkaEnv
)

// benchStorage is the storage over one queue of 100,000 dead letters of 256-byte values in 3
// partitions (made once for all benchmarks).
func benchStorage(b *testing.B) (*dlqapi.Storage, context.Context) {
	b.Helper()
	// The cluster outlives the benchmark that makes it: kept for the process.
	benchOnce.Do(func() { benchKafka = newKafka(keep{b}, "bench.dlq", 3, benchTotal, 256) })
	s := &dlqapi.Storage{
		Queues: dlqapi.StaticQueues{"shop": {{Name: "bench-dlq", Topic: benchKafka.topic, Conn: benchKafka.conn}}},
		Kafka:  benchKafka.f,
	}
	return s, genericapirequest.WithNamespace(context.Background(), "shop")
}

// BenchmarkFirstPage lists the first page (kubectl's default chunk, 500) of the queue.
func BenchmarkFirstPage(b *testing.B) {
	s, ctx := benchStorage(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		obj, err := s.List(ctx, &metainternalversion.ListOptions{Limit: 500})
		if err != nil {
			b.Fatal(err)
		}
		if l := obj.(*dlv1.DeadLetterList); len(l.Items) != 500 || l.Continue == "" {
			b.Fatalf("%d items, continue %q", len(l.Items), l.Continue)
		}
	}
}

// BenchmarkFilteredScan lists, with a label selector matching 1% of the queue (1,000 dead
// letters), the whole queue, following the continue tokens (a page holds at most 500).
func BenchmarkFilteredScan(b *testing.B) { filteredScan(b, false) }

// BenchmarkFilteredScanLiveHeap is BenchmarkFilteredScan with the GC target at 5%, so that the heap
// seen is close to what is live: liveHeapMiB is the largest heap seen while it ran above the heap
// before (which holds the in-process kfake broker and its 100,000 records). Its time is not the
// scan's (the GC runs all the time).
func BenchmarkFilteredScanLiveHeap(b *testing.B) { filteredScan(b, true) }

func filteredScan(b *testing.B, heap bool) {
	s, ctx := benchStorage(b)
	sel := labels.SelectorFromSet(labels.Set{dlv1.LabelReason: rareReason})
	var peak func() uint64
	if heap {
		peak = trackHeap(b)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		n, cont := 0, ""
		for {
			obj, err := s.List(ctx, &metainternalversion.ListOptions{LabelSelector: sel, Continue: cont})
			if err != nil {
				b.Fatal(err)
			}
			l := obj.(*dlv1.DeadLetterList)
			n += len(l.Items)
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if n != benchTotal/100 {
			b.Fatalf("%d items", n)
		}
	}
	b.StopTimer()
	if heap {
		b.ReportMetric(float64(peak())/(1<<20), "liveHeapMiB")
	}
}

// trackHeap samples the live heap every 10ms until the benchmark ends (dlqapi.TrackHeap); the
// returned function stops it and returns the largest HeapAlloc seen above the one at the start.
func trackHeap(b *testing.B) func() uint64 {
	stop := dlqapi.TrackHeap(10 * time.Millisecond)
	b.Cleanup(func() { stop() })
	return stop
}

// keep is a testing.TB whose Cleanup functions never run.
type keep struct{ testing.TB }

func (keep) Cleanup(func()) {}
