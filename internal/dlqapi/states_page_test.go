package dlqapi

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// countingKafka counts the records of one topic that scans hand out, and scans it 1,000 offsets
// at a time, as a broker's fetches stream a topic (kafkafake gathers a whole range first).
type countingKafka struct {
	Kafka
	topic string
	n     atomic.Int64
}

func (c *countingKafka) Scan(ctx context.Context, conn kafka.Connection, ranges map[string]map[int32]kafka.OffsetRange, fn func(kafka.Record)) error {
	count := func(r kafka.Record) {
		if r.Topic == c.topic {
			c.n.Add(1)
		}
		fn(r)
	}
	parts, ok := ranges[c.topic]
	if !ok || len(ranges) != 1 {
		return c.Kafka.Scan(ctx, conn, ranges, count)
	}
	for p, r := range parts {
		for from := r.From; from < r.To; from += 1000 {
			sub := map[string]map[int32]kafka.OffsetRange{c.topic: {p: {From: from, To: min(from+1000, r.To)}}}
			if err := c.Kafka.Scan(ctx, conn, sub, count); err != nil {
				return err
			}
		}
	}
	return nil
}

// peakHeap runs fn with the GC target at 5% and returns the largest live heap seen while it ran
// above the heap before, sampled every millisecond.
func peakHeap(fn func()) uint64 {
	stop := TrackHeap(time.Millisecond)
	fn()
	return stop()
}

// TrackHeap sets the GC target to 5% (so that the heap seen is close to what is live, not garbage
// waiting), then samples the heap every interval; the returned function stops the sampling, puts
// the GC target back and returns the largest HeapAlloc seen above the one at the start. For the
// tests and benchmarks of this package (dlqapi_test's too).
func TrackHeap(every time.Duration) (stop func() uint64) {
	old := debug.SetGCPercent(5)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > base.HeapAlloc && ms.HeapAlloc-base.HeapAlloc > peak.Load() {
					peak.Store(ms.HeapAlloc - base.HeapAlloc)
				}
			}
		}
	}()
	return sync.OnceValue(func() uint64 {
		close(done)
		wg.Wait()
		debug.SetGCPercent(old)
		return peak.Load()
	})
}

// manyDecisions is a kafkafake queue of 100,000 dead letters (the first 10 with a record), each
// resolved; note gives the note of the i-th decision.
func manyDecisions(t *testing.T, note func(i int) string) (*Storage, *countingKafka, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	const decisions = 100000
	f := kafkafake.New()
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	topic := "many.dlq"
	state, _ := deadletters.StateTopic(topic)
	f.AddTopic(topic, 1, 1, nil)
	f.AddTopic(state, 1, 1, nil)
	var recs []kafka.ProduceRecord
	for i := range 10 {
		recs = append(recs, kafka.ProduceRecord{Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v"), Partition: 0})
	}
	if _, err := f.ProduceRecords(ctx, conn, topic, recs); err != nil {
		t.Fatal(err)
	}
	f.Produce(topic, 0, decisions-10)
	ids, err := f.TopicIDs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for start := 0; start < decisions; start += 5000 {
		var ups []deadletters.StateUpdate
		for i := start; i < start+5000; i++ {
			ups = append(ups, deadletters.StateUpdate{ID: deadletters.ID{Partition: 0, Offset: int64(i)}, State: deadletters.State{
				State: retryv1alpha1.DeadLetterResolved, Note: note(i), RequestedBy: "alice@example.com", TopicID: ids[topic],
				Action: deadletters.ActionRef{Namespace: "shop", Name: fmt.Sprintf("resolve-%d", i/20000), UID: fmt.Sprintf("8f0c1d2e-3a4b-4c5d-9e6f-7a8b9c0d1e%02d", i/20000)},
				Time:   t0.Add(time.Duration(i) * time.Millisecond)}})
		}
		if _, err := deadletters.WriteStates(ctx, f, conn, topic, ups); err != nil {
			t.Fatal(err)
		}
	}
	kf := &countingKafka{Kafka: f, topic: state}
	s := &Storage{Kafka: kf, Queues: StaticQueues{"shop": {{Name: "many", Topic: topic, Conn: conn}}}}
	return s, kf, genericapirequest.WithNamespace(ctx, "shop")
}

// TestAPageOfManyDecisionsFollowsThePage: a page of one dead letter of a queue with 100,000
// decisions on the records it holds keeps little more than the page live, whether the decisions
// are made by a few actions (their note, requester and action shared: kept, and not read again by
// the next pages) or each has a note of its own (more than the cache keeps of a queue: only those
// of the page's records are kept while it is read).
func TestAPageOfManyDecisionsFollowsThePage(t *testing.T) {
	const maxPeak = 32 << 20
	for _, c := range []struct {
		name   string
		note   func(int) string
		cached bool
	}{
		{"made by actions", func(i int) string { return fmt.Sprintf("handled by the billing team by hand, batch %d", i/20000) }, true},
		{"a note each", func(i int) string { return fmt.Sprintf("%06d %s", i, strings.Repeat("n", 500)) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, kf, ctx := manyDecisions(t, c.note)
			for i := range 3 {
				kf.n.Store(0)
				var obj any
				var err error
				peak := peakHeap(func() { obj, err = s.List(ctx, &metainternalversion.ListOptions{Limit: 1}) })
				if err != nil {
					t.Fatal(err)
				}
				l := obj.(*dlv1.DeadLetterList)
				if len(l.Items) != 1 || l.Items[0].State.State != dlv1.StateResolved {
					t.Fatalf("page %d: %d items %+v", i, len(l.Items), l.Items)
				}
				t.Logf("page %d: peak live heap %d MiB, %d decisions read", i, peak>>20, kf.n.Load())
				if peak > maxPeak {
					t.Errorf("page %d of 1 dead letter over 100,000 decisions: peak live heap %d MiB, more than %d MiB", i, peak>>20, maxPeak>>20)
				}
				if c.cached && i > 0 && kf.n.Load() != 0 {
					t.Errorf("page %d: %d decisions read again, want 0 (kept from the first page)", i, kf.n.Load())
				}
			}
		})
	}
}

// TestDecisionBytes: the cache's estimate of the memory its decisions take is at least what they
// take, and not more than twice; 100,000 decisions made by a few actions fit in what it keeps of a
// queue with room to spare (10 MiB of 16), and so do 4,000 with a 1 KiB note each.
func TestDecisionBytes(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		n    int
		note func(int) string
	}{
		{"made by actions", 100000, func(i int) string { return fmt.Sprintf("batch %d", i/20000) }},
		{"a note each", 4000, func(i int) string { return fmt.Sprintf("%06d %s", i, strings.Repeat("n", 1017)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			states := make([]deadletters.State, c.n)
			for i := range states {
				states[i] = deadletters.State{State: retryv1alpha1.DeadLetterResolved, Note: c.note(i), RequestedBy: "alice@example.com", TopicID: "Aq1xXCQpRku7c9zbT1Ug2w",
					Action: deadletters.ActionRef{Namespace: "shop", Name: fmt.Sprintf("resolve-%d", i/20000), UID: fmt.Sprintf("8f0c1d2e-3a4b-4c5d-9e6f-7a8b9c0d1e%02d", i/20000)},
					Time:   t0.Add(time.Duration(i) * time.Millisecond)}
			}
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			in := newInterner()
			for i, st := range states {
				// Decoded strings are copies of their own, as from the record.
				st.Note, st.RequestedBy = strings.Clone(st.Note), strings.Clone(st.RequestedBy)
				in.set(deadletters.ID{Offset: int64(i)}, st)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			used := int(after.HeapAlloc) - int(before.HeapAlloc)
			if got := in.d.Get(deadletters.ID{Offset: 7}); got != states[7] {
				t.Errorf("decision kept as %+v, want %+v", got, states[7])
			}
			runtime.KeepAlive(in)
			t.Logf("%d decisions: %d KiB estimated, %d KiB used", c.n, in.bytes>>10, used>>10)
			if in.bytes < used || in.bytes > 2*used {
				t.Errorf("%d decisions: %d KiB estimated, %d KiB used", c.n, in.bytes>>10, used>>10)
			}
			if in.bytes > maxCachedStateBytes*5/8 {
				t.Errorf("%d decisions: %d KiB, more than 5/8 of the %d KiB kept of a queue", c.n, in.bytes>>10, maxCachedStateBytes>>10)
			}
		})
	}
}
