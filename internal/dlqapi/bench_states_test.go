package dlqapi_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/kafka"
)

// benchGone is how many dead letters of the history queue are gone (deleted below the start
// offsets) with a decision recorded on each.
const benchGone = 60000

var (
	historyOnce  sync.Once
	historyKafka *kafkaEnv
)

// historyStorage is the storage over one queue of 100,000 dead letters of 256-byte values in 3
// partitions, behind 60,000 dead letters that retention deleted (20,000 per partition) after each
// was resolved: its record of decisions holds 60,000 decisions on records that are gone (made once
// for all benchmarks; a new Storage each call).
func historyStorage(b *testing.B) (*dlqapi.Storage, context.Context) {
	b.Helper()
	historyOnce.Do(func() {
		const parts = 3
		e := newKafka(keep{b}, "history.dlq", parts, 0, 0)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		produce := func(recs []kafka.ProduceRecord) {
			res, err := e.f.ProduceRecords(ctx, e.conn, e.topic, recs)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
			}
		}
		const batch = 2000
		for start := 0; start < benchGone; start += batch {
			recs := make([]kafka.ProduceRecord, 0, batch)
			for i := start; i < start+batch; i++ {
				recs = append(recs, kafka.ProduceRecord{Key: fmt.Appendf(nil, "gone-%d", i), Value: []byte("x"), Partition: int32(i % parts)})
			}
			produce(recs)
		}
		for start := 0; start < benchTotal; start += batch {
			recs := make([]kafka.ProduceRecord, 0, batch)
			for i := start; i < start+batch; i++ {
				recs = append(recs, e.record(i, int32(i%parts), 256))
			}
			produce(recs)
		}
		admin, err := e.f.Admin(ctx, e.conn)
		if err != nil {
			b.Fatal(err)
		}
		before := map[int32]int64{}
		for p := range int32(parts) {
			before[p] = benchGone / parts
		}
		if err := admin.DeleteRecordsBefore(ctx, e.topic, before); err != nil {
			b.Fatal(err)
		}
		for start := 0; start < benchGone; start += batch {
			ups := make([]deadletters.StateUpdate, 0, batch)
			for i := start; i < start+batch; i++ {
				ups = append(ups, deadletters.StateUpdate{
					ID: deadletters.ID{Partition: int32(i % parts), Offset: int64(i / parts)},
					State: deadletters.State{State: retryv1alpha1.DeadLetterResolved, Note: "handled by the billing team by hand", RequestedBy: "alice@example.com",
						Action: deadletters.ActionRef{Namespace: "shop", Name: "resolve-old", UID: "8f0c1d2e-3a4b-4c5d-9e6f-7a8b9c0d1e2f"}, Time: e.t0},
				})
			}
			if _, err := deadletters.WriteStates(ctx, e.f, e.conn, e.topic, ups); err != nil {
				b.Fatal(err)
			}
		}
		historyKafka = e
	})
	s := &dlqapi.Storage{
		Queues: dlqapi.StaticQueues{"shop": {{Name: "history-dlq", Topic: historyKafka.topic, Conn: historyKafka.conn}}},
		Kafka:  historyKafka.f,
	}
	return s, genericapirequest.WithNamespace(context.Background(), "shop")
}

// BenchmarkPageOverGoneDecisions lists one page (limit 1, and kubectl's 500) of the history queue
// again and again through one Storage, as a manager replica serves them (after one page first,
// outside the timer): the cost of a page should follow the page, not the 60,000 decisions on
// records that are gone. The cold ones list each page through a new Storage: a replica's first
// page of the queue. peakHeapMiB is the largest live heap seen above the heap before the loop (the
// GC target at 5%, so the time of those is not the page's: compare ns/op of the others).
func BenchmarkPageOverGoneDecisions(b *testing.B) {
	for _, limit := range []int64{1, 500} {
		for _, v := range []string{"", "/heap", "/cold", "/cold/heap"} {
			heap, cold := strings.HasSuffix(v, "heap"), strings.HasPrefix(v, "/cold")
			b.Run(fmt.Sprintf("limit=%d%s", limit, v), func(b *testing.B) {
				s, ctx := historyStorage(b)
				if _, err := s.List(ctx, &metainternalversion.ListOptions{Limit: limit}); err != nil {
					b.Fatal(err)
				}
				var peak func() uint64
				if heap {
					peak = trackHeap(b)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if cold {
						s, _ = historyStorage(b)
					}
					obj, err := s.List(ctx, &metainternalversion.ListOptions{Limit: limit})
					if err != nil {
						b.Fatal(err)
					}
					if l := obj.(*dlv1.DeadLetterList); int64(len(l.Items)) != limit || l.Continue == "" {
						b.Fatalf("%d items, continue %q", len(l.Items), l.Continue)
					}
				}
				b.StopTimer()
				if heap {
					b.ReportMetric(float64(peak())/(1<<20), "peakHeapMiB")
				}
			})
		}
	}
}
