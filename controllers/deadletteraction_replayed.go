package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// replayFactory is the factory a dead-letter action's run writes through (f wrapped):
//   - a write of replayed records (those carrying headers.ReplayOf) into a retry tier that is no
//     longer the first tier of the pipeline the records name (read through reader; a policy or
//     naming change made it unused since the run looked it up, or the pipeline is gone) is refused
//     before anything is written: the run stops and resumes from its checkpoint, looking its
//     targets up again, rather than write into a tier that drains and then is deleted (Delete)
//     or no longer consumed (Retain). A nil reader checks nothing;
//   - where it wrote replayed records is noted in k.Replayed, so that a pipeline's due lag and wake
//     time count them as due when written (readDueLag).
func (k *kafkaAccess) replayFactory(f kafka.ClientFactory, reader client.Reader) kafka.ClientFactory {
	return replayWriter{ClientFactory: f, k: k, reader: reader}
}

// replayWriter is the ClientFactory of replayFactory.
type replayWriter struct {
	kafka.ClientFactory
	k      *kafkaAccess
	reader client.Reader
}

func (w replayWriter) ProduceRecords(ctx context.Context, conn kafka.Connection, topic string, records []kafka.ProduceRecord) ([]kafka.ProduceResult, error) {
	if err := w.checkTier(ctx, topic, records); err != nil {
		return nil, err
	}
	res, err := w.ClientFactory.ProduceRecords(ctx, conn, topic, records)
	if w.k.Replayed == nil {
		return res, err
	}
	replayed := make([]kafka.ProduceResult, 0, len(res))
	for i := range min(len(res), len(records)) {
		if _, ok := replayOf(records[i]); ok {
			replayed = append(replayed, res[i])
		}
	}
	w.k.Replayed.Note(conn.Key(), topic, replayed)
	return res, err
}

// errTierMoved is why a replay's write into a tier is refused (checkTier).
var errTierMoved = errors.New("the replay's target moved")

// checkTier refuses replayed records written into a retry tier (by its name: a spec.target.topic
// never is one) unless it is the first tier, in status, of the pipeline they name
// (headers.Pipeline): the one deadletters.Targets looked up when the run started may have become
// unused since. The pipeline is read from the manager's cache once per write.
func (w replayWriter) checkTier(ctx context.Context, topic string, records []kafka.ProduceRecord) error {
	if w.reader == nil || !deadletters.IsRetryTierName(topic) {
		return nil
	}
	seen := map[string]bool{}
	for _, r := range records {
		id, ok := replayOf(r)
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		ns, name, ok := strings.Cut(id, "/")
		if !ok {
			return fmt.Errorf("%w: a replayed record for %s names no pipeline", errTierMoved, topic)
		}
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := w.reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("%w: pipeline %s, whose retry topic %s the run looked up, no longer exists", errTierMoved, id, topic)
			}
			return err
		}
		if p.Status.Topics == nil || len(p.Status.Topics.Retries) == 0 || p.Status.Topics.Retries[0].Name != topic {
			return fmt.Errorf("%w: %s is no longer the first retry topic of pipeline %s (a policy or naming change): the run resumes into its current one", errTierMoved, topic, id)
		}
	}
	return nil
}

// replayOf says whether r is a replayed record, and the pipeline (headers.Pipeline) it names.
func replayOf(r kafka.ProduceRecord) (pipeline string, replayed bool) {
	for _, h := range r.Headers {
		switch h.Key {
		case headers.ReplayOf:
			replayed = true
		case headers.Pipeline:
			pipeline = string(h.Value)
		}
	}
	return pipeline, replayed
}

// replayedDue is the number of replayed records of a tier that the due offsets ends did not count
// as due (kafkastats.Replayed.ReplayedDue); 0 when none are noted.
func (k *kafkaAccess) replayedDue(connKey, topic string, offsets []kafka.PartitionOffsets, committed map[int32]int64, ends map[int32]kafka.TimedOffset) int64 {
	if k.Replayed == nil {
		return 0
	}
	return k.Replayed.ReplayedDue(connKey, topic, offsets, committed, ends)
}
