package dlqapi

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// queuesResource names DeadLetterQueues in errors.
var queuesResource = retryv1alpha1.GroupVersion.WithResource("deadletterqueues").GroupResource()

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
// spec.kafka names through Secrets (an uncached reader: Secrets are never cached). A queue's records
// are served only when it manages its topic: the topic ledger records the topic for it (the
// operator created it for the queue, or the queue adopted it); any other queue is served as holding
// none (NotOwnedError), as the operator reads none of its records either.
type ClientQueues struct {
	Reader   client.Reader
	Secrets  client.Reader
	Defaults kafkaspec.Defaults
	// Ledger is the operator's topic ledger, read afresh (Ledger.Recorded). Required: without it no
	// queue's records are served.
	Ledger *kafkaspec.Ledger
	// Namespaces, when not empty, are the only namespaces the manager watches (--watch-namespaces):
	// a queue elsewhere is not the operator's, and Reader, a cache of those namespaces, cannot read it.
	Namespaces []string

	// owned memoises the positive answers of the ledger, by queue UID: a queue's topic name is
	// immutable and stays in its record until the queue is deleted (a new queue has a new UID).
	mu    sync.Mutex
	owned map[types.UID]bool
}

// maxOwnedMemo bounds the memo of queues that manage their topics (it starts again when full).
const maxOwnedMemo = 10000

// NotOwnedError says a queue does not manage the topic it names: its records are not served.
type NotOwnedError struct {
	Namespace, Queue, Topic string
	// Refused is set when the claim policy gives the topic to another namespace.
	Refused bool
}

func (e *NotOwnedError) Error() string {
	if e.Refused {
		return fmt.Sprintf("DeadLetterQueue %s/%s names topic %q, which the manager's claim policy does not give its namespace (reason TopicClaimRefused); its records are not shown",
			e.Namespace, e.Queue, e.Topic)
	}
	return fmt.Sprintf("DeadLetterQueue %s/%s does not manage its topic %q (the operator did not create it for the queue and the queue did not adopt it: reason TopicNotOwned); its records are not shown",
		e.Namespace, e.Queue, e.Topic)
}

// watches reports whether the manager watches namespace.
func (c *ClientQueues) watches(namespace string) bool {
	return len(c.Namespaces) == 0 || slices.Contains(c.Namespaces, namespace)
}

// Names implements Queues.
func (c *ClientQueues) Names(ctx context.Context, namespace string) ([]string, error) {
	if !c.watches(namespace) {
		return []string{}, nil
	}
	var list retryv1alpha1.DeadLetterQueueList
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
	if !c.watches(namespace) {
		return Queue{}, apierrors.NewNotFound(queuesResource, name)
	}
	var q retryv1alpha1.DeadLetterQueue
	if err := c.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &q); err != nil {
		return Queue{}, err
	}
	topic := string(q.Spec.Topic.Name)
	if c.Defaults.CheckClaim(namespace, topic) != nil {
		// The claim policy gives the topic to another namespace, whatever the ledger recorded before.
		return Queue{}, &NotOwnedError{Namespace: namespace, Queue: name, Topic: topic, Refused: true}
	}
	owned, err := c.manages(ctx, &q, topic)
	if err != nil {
		return Queue{}, apierrors.NewServiceUnavailable("DeadLetterQueue " + name + ": " + err.Error())
	}
	if !owned {
		return Queue{}, &NotOwnedError{Namespace: namespace, Queue: name, Topic: topic}
	}
	conn, err := kafkaspec.Resolve(ctx, c.Secrets, namespace, q.Spec.Kafka, c.Defaults)
	if err != nil {
		return Queue{}, apierrors.NewServiceUnavailable("DeadLetterQueue " + name + ": " + err.Error())
	}
	return Queue{Name: name, Topic: topic, Conn: conn}, nil
}

// manages reports whether the ledger records topic for q.
func (c *ClientQueues) manages(ctx context.Context, q *retryv1alpha1.DeadLetterQueue, topic string) (bool, error) {
	if c.Ledger == nil {
		return false, nil
	}
	c.mu.Lock()
	known := c.owned[q.UID]
	c.mu.Unlock()
	if known {
		return true, nil
	}
	owned, err := c.Ledger.Recorded(ctx, q, topic)
	if err != nil || !owned {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.owned == nil || len(c.owned) >= maxOwnedMemo {
		c.owned = map[types.UID]bool{}
	}
	c.owned[q.UID] = true
	return true, nil
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
	return Queue{}, apierrors.NewNotFound(queuesResource, strings.TrimSpace(name))
}
