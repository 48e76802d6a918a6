package controllers

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
)

// Options are the operator-wide settings the manager passes to every controller.
type Options struct {
	// StatusRefreshInterval is how often live figures (DLQ counts, lag) are refreshed.
	StatusRefreshInterval time.Duration
	// DispatcherImage is the image of the dispatcher that serves sink-mode pipelines.
	DispatcherImage string
	// DefaultBootstrapServers is the operator-wide Kafka connection used by resources whose spec.kafka
	// names no bootstrap servers.
	DefaultBootstrapServers []string
}

// SetupWithManager registers every controller of the operator with mgr.
func SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	_ = opts
	if err := setupIndexes(ctx, mgr); err != nil {
		return fmt.Errorf("indexing pipelines: %w", err)
	}
	if err := (&RetryPolicyReconciler{
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("retrypolicy-controller"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("retrypolicy controller: %w", err)
	}
	return nil
}
