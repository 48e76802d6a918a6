package controllers

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
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

// requestsForOthers lists the objects indexed under key and returns a request for each of them but
// self: the other claimants of one topic.
func requestsForOthers(ctx context.Context, c client.Client, self client.Object, list client.ObjectList, index, key string) []ctrl.Request {
	if err := c.List(ctx, list, client.MatchingFields{index: key}); err != nil {
		return nil
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil
	}
	var out []ctrl.Request
	for _, item := range items {
		if o, ok := item.(client.Object); ok && o.GetUID() != self.GetUID() {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return out
}
