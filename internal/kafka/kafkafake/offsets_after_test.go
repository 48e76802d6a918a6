package kafkafake_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
)

// The fake answers OffsetsAfter from the records it was given, as Kafka would.
func TestFakeOffsetsAfter(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	f := kafkafake.New()
	g.Expect(f.CreateTopic(ctx, "a", 2, 1, nil)).To(Succeed())
	t0 := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	var recs []kafka.ProduceRecord
	for i := range 4 {
		recs = append(recs, kafka.ProduceRecord{Partition: 0, Timestamp: t0.Add(time.Duration(i) * time.Minute)})
	}
	_, err := f.ProduceRecords(ctx, kafka.Connection{BootstrapServers: []string{"fake:9092"}}, "a", recs)
	g.Expect(err).NotTo(HaveOccurred())

	got, err := f.OffsetsAfter(ctx, map[string]time.Time{"a": t0.Add(90 * time.Second), "missing": t0})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(map[string]map[int32]kafka.TimedOffset{"a": {
		0: {Offset: 2, Timestamp: t0.Add(2 * time.Minute).UnixMilli()},
		1: {Offset: -1, Timestamp: -1},
	}}))
}
