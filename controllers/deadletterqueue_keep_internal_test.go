package controllers

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/lease"
)

// TestAQueueReconciledThroughAnOutageKeepsItsFigures: a queue whose reconciles cannot read Kafka
// for longer than the leases still renews its tally, its counts by pipeline, its growth history and
// its state counts at each reconcile (keepFigures), while what a deleted queue left goes.
func TestAQueueReconciledThroughAnOutageKeepsItsFigures(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	f := kafkafake.New()
	f.AddTopic("alive.dlq", 1, 1, nil)
	f.AddTopic("gone.dlq", 1, 1, nil)
	f.AddTopic("third.dlq", 1, 1, nil)
	offsets := kafkastats.NewOffsets(clk)
	r := &DeadLetterQueueReconciler{
		topicReconciler: topicReconciler{Clock: clk, Kafka: &kafkaAccess{Offsets: offsets, Tallies: kafkastats.NewTallies(offsets, f), ByPipeline: &kafkastats.Counts{}}},
		growth:          &growthHistory{}, stateCounts: &stateCountCache{},
	}
	const interval = 30 * time.Second
	queue := func(name string) *retryv1alpha1.DeadLetterQueue {
		return &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: k8stypes.UID("uid-" + name)}}
	}
	alive, gone := queue("alive"), queue("gone")
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}
	if _, err := f.ProduceRecords(ctx, conn, "alive.dlq", []kafka.ProduceRecord{{Value: []byte("a")}, {Value: []byte("b")}, {Value: []byte("c")}}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []*retryv1alpha1.DeadLetterQueue{alive, gone} {
		topic := q.Name + ".dlq"
		po, _ := f.ListOffsets(ctx, topic)
		if _, err := r.Kafka.Tallies.Breakdown(ctx, conn, "conn", dlqFigures(q), topic, po[topic], clk.Now(), interval); err != nil {
			t.Fatal(err)
		}
		r.Kafka.ByPipeline.Set(dlqFigures(q), nil, clk.Now(), interval)
		r.growth.record(q.UID, clk.Now(), 0, dlqGrowthWindow(q))
		r.stateCounts.set(q.UID, stateCountEntry{}, clk.Now(), interval)
	}
	for end := clk.Now().Add(lease.For(dlqGrowthWindow(alive)) + 2*lease.Min); clk.Now().Before(end); {
		clk.SetTime(clk.Now().Add(interval))
		r.keepFigures(alive, interval) // Kafka unreachable: the phases after the connection never run
	}
	// Another queue's refresh sweeps what was not renewed; the living queue's tally needs no scan.
	third := queue("third")
	r.Kafka.ByPipeline.Set(dlqFigures(third), nil, clk.Now(), interval)
	r.growth.record(third.UID, clk.Now(), 0, dlqGrowthWindow(third))
	r.stateCounts.set(third.UID, stateCountEntry{}, clk.Now(), interval)
	po, _ := f.ListOffsets(ctx, "third.dlq")
	if _, err := r.Kafka.Tallies.Breakdown(ctx, conn, "conn", dlqFigures(third), "third.dlq", po["third.dlq"], clk.Now(), interval); err != nil {
		t.Fatal(err)
	}
	f.ResetCalls()
	po, _ = f.ListOffsets(ctx, "alive.dlq")
	b, err := r.Kafka.Tallies.Breakdown(ctx, conn, "conn", dlqFigures(alive), "alive.dlq", po["alive.dlq"], clk.Now(), interval)
	if err != nil {
		t.Fatal(err)
	}
	if n := f.CallCount(kafkafake.Scan); n != 0 || b.Messages != 3 {
		t.Errorf("after the outage: %d scans, %d messages; want the tally kept (0 scans, 3)", n, b.Messages)
	}
	if _, ok := r.Kafka.ByPipeline.Get(dlqFigures(alive), "ns/p", clk.Now()); !ok {
		t.Error("the living queue's counts by pipeline went")
	}
	if _, ok := r.growth.last(alive.UID); !ok {
		t.Error("the living queue's growth history went")
	}
	if _, ok := r.stateCounts.get(alive.UID, "", nil, clk.Now(), interval); !ok {
		t.Error("the living queue's state counts went")
	}
	if _, ok := r.growth.last(gone.UID); ok {
		t.Error("the deleted queue's growth history stayed")
	}
	if _, ok := r.Kafka.ByPipeline.Get(dlqFigures(gone), "ns/p", clk.Now()); ok {
		t.Error("the deleted queue's counts stayed")
	}
}
