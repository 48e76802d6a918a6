package controllers

import (
	"context"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// NewReconcilers builds the DeadLetterQueue and ConsumerPipeline reconcilers as SetupWithManager
// does, on client c, for the tests that call Reconcile directly (mgr gives the scheme, the REST
// mapper and the event recorders; it need not run).
func NewReconcilers(mgr ctrl.Manager, c client.Client, opts Options) (*DeadLetterQueueReconciler, *ConsumerPipelineReconciler, error) {
	rs, err := newReconcilers(mgr, c, opts)
	if err != nil {
		return nil, nil, err
	}
	return rs.queue, rs.pipeline, nil
}

// PolicyCompilations is how many times the ConsumerPipeline reconciler's shared policy cache
// compiled a RetryPolicy.
func (r *ConsumerPipelineReconciler) PolicyCompilations() int64 { return r.Policies.Compilations() }

// SweepLedger runs one sweep of the topic ledger as the leader's sweeper does, reading resources
// through api.
func SweepLedger(ctx context.Context, api client.Reader, ledger *kafkaspec.Ledger) []kafkaspec.Orphan {
	return (&ledgerSweeper{ledger: ledger, api: api, log: logr.Discard()}).sweep(ctx)
}

// NewActionReconciler builds the DeadLetterAction reconciler as NewReconcilers builds the others.
func NewActionReconciler(mgr ctrl.Manager, c client.Client, opts Options) (*DeadLetterActionReconciler, error) {
	rs, err := newReconcilers(mgr, c, opts)
	if err != nil {
		return nil, err
	}
	return rs.action, nil
}

// Held is how many resources the reconcilers' in-memory stores hold, by store.
func Held(q *DeadLetterQueueReconciler, p *ConsumerPipelineReconciler) map[string]int {
	k := q.Kafka
	return map[string]int{
		"offsets": k.Offsets.Members(), "topics": k.Topics.Members(), "commits": k.Commits.Members(),
		"due": k.Due.Members(), "tallies": k.Tallies.Members(), "byPipeline": k.ByPipeline.Len(),
		"connections": k.Connections.Users(), "growth": q.growth.len(), "stateCounts": q.stateCounts.queues.Len(),
		"templates": p.templates.ok.Len(), "missing": q.missing.len() + p.missing.len(),
	}
}
