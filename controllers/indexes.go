package controllers

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Field indexes on ConsumerPipelines, so that a policy or a dead letter queue finds its pipelines
// without listing every pipeline of the namespace.
const (
	indexPipelineByPolicy = ".spec.retryPolicyRef.name"
	indexPipelineByDLQ    = ".spec.deadLetterQueueRef.name"
)

func setupIndexes(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1.ConsumerPipeline{}, indexPipelineByPolicy, func(o client.Object) []string {
		return []string{o.(*v1.ConsumerPipeline).Spec.RetryPolicyRef.Name}
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1.ConsumerPipeline{}, indexPipelineByDLQ, func(o client.Object) []string {
		return []string{o.(*v1.ConsumerPipeline).Spec.DeadLetterQueueRef.Name}
	})
}
