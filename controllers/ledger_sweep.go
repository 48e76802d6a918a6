package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// ledgerSweepInterval is how often the leader sweeps the topic ledger (and once at start).
const ledgerSweepInterval = time.Hour

// ledgerSweeper deletes the topic ledger's records of resources that no longer exist (a finalizer
// removed by hand, a record whose Drop failed), so that the manager's namespace does not collect
// them; it logs the topics such a record held, which stay in Kafka with no resource owning them.
// It runs on the leader only: only the leader writes the ledger.
type ledgerSweeper struct {
	ledger *kafkaspec.Ledger
	// api reads the resources uncached (a resource outside --watch-namespaces is not in the cache,
	// and a record must never be dropped because a cache has not seen its resource).
	api client.Reader
	log logr.Logger
	// clock paces the sweeps (the real clock when nil).
	clock clock.WithTicker
}

// NeedLeaderElection: only the leader writes the ledger.
func (s *ledgerSweeper) NeedLeaderElection() bool { return true }

// Start sweeps at once, then every ledgerSweepInterval until ctx ends.
func (s *ledgerSweeper) Start(ctx context.Context) error {
	c := s.clock
	if c == nil {
		c = clock.RealClock{}
	}
	t := c.NewTicker(ledgerSweepInterval)
	defer t.Stop()
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// sweep runs one sweep and logs what it dropped; an error is logged and the next sweep tries again.
func (s *ledgerSweeper) sweep(ctx context.Context) []kafkaspec.Orphan {
	orphans, err := s.ledger.Sweep(ctx, s.uidOf)
	for _, o := range orphans {
		s.log.Info("Dropped the topic ledger's record of a resource that no longer exists; its topics stay in Kafka and no resource owns them now",
			"kind", o.Kind, "resource", o.Namespace+"/"+o.Name, "uid", o.UID, "topics", o.Topics)
	}
	if err != nil {
		s.log.Error(err, "Sweeping the topic ledger")
	}
	return orphans
}

// uidOf reads the UID of a resource named by a ledger record, metadata only.
func (s *ledgerSweeper) uidOf(ctx context.Context, kind, namespace, name string) (types.UID, error) {
	switch kind {
	case "DeadLetterQueue", "ConsumerPipeline":
	default:
		return "", fmt.Errorf("the topic ledger names an unknown kind %q", kind)
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(retryv1alpha1.GroupVersion.WithKind(kind))
	if err := s.api.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, m); err != nil {
		return "", err
	}
	return m.UID, nil
}
