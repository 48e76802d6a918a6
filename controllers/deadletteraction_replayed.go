package controllers

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// replayFactory is the factory a dead-letter action's run writes through: where it writes replayed
// records (those carrying headers.ReplayOf) is noted in k.Replayed, so that a pipeline's due lag
// and wake time count them as due when written (readDueLag).
func (k *kafkaAccess) replayFactory(f kafka.ClientFactory, _ client.Reader) kafka.ClientFactory {
	if k.Replayed == nil {
		return f
	}
	return replayNoting{ClientFactory: f, k: k}
}

// replayNoting is a ClientFactory whose produces note the replayed records acknowledged.
type replayNoting struct {
	kafka.ClientFactory
	k *kafkaAccess
}

func (n replayNoting) ProduceRecords(ctx context.Context, conn kafka.Connection, topic string, records []kafka.ProduceRecord) ([]kafka.ProduceResult, error) {
	res, err := n.ClientFactory.ProduceRecords(ctx, conn, topic, records)
	replayed := make([]kafka.ProduceResult, 0, len(res))
	for i := range min(len(res), len(records)) {
		if isReplay(records[i]) {
			replayed = append(replayed, res[i])
		}
	}
	n.k.Replayed.Note(conn.Key(), topic, replayed)
	return res, err
}

func isReplay(r kafka.ProduceRecord) bool {
	for _, h := range r.Headers {
		if h.Key == headers.ReplayOf {
			return true
		}
	}
	return false
}

// replayedDue is the number of replayed records of a tier that the due offsets ends did not count
// as due (kafkastats.Replayed.ReplayedDue); 0 when none are noted.
func (k *kafkaAccess) replayedDue(connKey, topic string, offsets []kafka.PartitionOffsets, committed map[int32]int64, ends map[int32]kafka.TimedOffset) int64 {
	if k.Replayed == nil {
		return 0
	}
	return k.Replayed.ReplayedDue(connKey, topic, offsets, committed, ends)
}
