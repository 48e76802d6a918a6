package dlqapi

import (
	"context"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// Queue is a DeadLetterQueue as the API reads it: its topic and how to reach its cluster.
type Queue struct {
	Name  string
	Topic string
	Conn  kafka.Connection
}

// Queues finds the DeadLetterQueues of a namespace.
type Queues interface {
	// Names lists the namespace's queues, sorted.
	Names(ctx context.Context, namespace string) ([]string, error)
	// Get resolves one queue (a NotFound API error when it does not exist).
	Get(ctx context.Context, namespace, name string) (Queue, error)
}

// ClientQueues reads DeadLetterQueues through Reader (the manager's cache) and the Secrets their
// spec.kafka names through Secrets (an uncached reader: Secrets are never cached).
type ClientQueues struct {
	Reader   client.Reader
	Secrets  client.Reader
	Defaults kafkaspec.Defaults
}

// Names implements Queues.
func (c *ClientQueues) Names(ctx context.Context, namespace string) ([]string, error) {
	var list v1.DeadLetterQueueList
	if err := c.Reader.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].Name)
	}
	slices.Sort(names)
	return names, nil
}

// Get implements Queues.
func (c *ClientQueues) Get(ctx context.Context, namespace, name string) (Queue, error) {
	var q v1.DeadLetterQueue
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &q); err != nil {
		return Queue{}, err
	}
	conn, err := kafkaspec.Resolve(ctx, c.Secrets, namespace, q.Spec.Kafka, c.Defaults)
	if err != nil {
		return Queue{}, apierrors.NewServiceUnavailable("DeadLetterQueue " + name + ": " + err.Error())
	}
	return Queue{Name: name, Topic: string(q.Spec.Topic.Name), Conn: conn}, nil
}

// StaticQueues is a fixed set of queues per namespace, for tests and benchmarks.
type StaticQueues map[string][]Queue

// Names implements Queues.
func (s StaticQueues) Names(_ context.Context, namespace string) ([]string, error) {
	var names []string
	for _, q := range s[namespace] {
		names = append(names, q.Name)
	}
	slices.Sort(names)
	return names, nil
}

// Get implements Queues.
func (s StaticQueues) Get(_ context.Context, namespace, name string) (Queue, error) {
	for _, q := range s[namespace] {
		if q.Name == name {
			return q, nil
		}
	}
	return Queue{}, apierrors.NewNotFound(v1.GroupVersion.WithResource("deadletterqueues").GroupResource(), strings.TrimSpace(name))
}
