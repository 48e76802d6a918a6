package dlqapi_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// TestClientQueuesServeOnlyQueuesThatManageTheirTopic: a queue whose topic the ledger does not
// record for it is NotOwned (its records are not served) until the operator records it (the queue
// adopting it, say); from then on it is served.
func TestClientQueuesServeOnlyQueuesThatManageTheirTopic(t *testing.T) {
	ctx := context.Background()
	q := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "q", UID: "uid-q"},
		Spec: retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: "payments"}, Kafka: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"kafka:9092"}}}}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(q).Build()
	queues := &dlqapi.ClientQueues{Reader: c, Secrets: c, Ledger: &kafkaspec.Ledger{Reader: c, Namespace: "op"}}

	_, err := queues.Get(ctx, "team", "q")
	var notOwned *dlqapi.NotOwnedError
	if !errors.As(err, &notOwned) || notOwned.Topic != "payments" {
		t.Fatalf("a queue with no ledger record: %v, want NotOwnedError", err)
	}
	t.Log(err)
	writer := &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: "op"}
	if err := writer.Record(ctx, q, "payments"); err != nil {
		t.Fatal(err)
	}
	got, err := queues.Get(ctx, "team", "q")
	if err != nil || got.Topic != "payments" {
		t.Fatalf("once recorded: %+v, %v", got, err)
	}
	// Without a ledger nothing is served.
	if _, err := (&dlqapi.ClientQueues{Reader: c, Secrets: c}).Get(ctx, "team", "q"); !errors.As(err, &notOwned) {
		t.Fatalf("no ledger: %v, want NotOwnedError", err)
	}
}

// TestClientQueuesOutsideTheWatchedNamespaces: under --watch-namespaces, a namespace the manager
// does not watch has no queues of the operator's (an empty list, NotFound), and its reader (a
// cache of the watched namespaces, which fails on any other, as controller-runtime's does) is not
// asked: no error reaches the client as an internal error.
func TestClientQueuesOutsideTheWatchedNamespaces(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithInterceptorFuncs(interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if key.Namespace != "watched" {
				return fmt.Errorf("unable to get: %v because of unknown namespace for the cache", key)
			}
			return c.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			o := &client.ListOptions{}
			o.ApplyOptions(opts)
			if o.Namespace != "watched" {
				return fmt.Errorf("unable to list: %v because of unknown namespace for the cache", o.Namespace)
			}
			return c.List(ctx, list, opts...)
		},
	}).Build()
	queues := &dlqapi.ClientQueues{Reader: c, Secrets: c, Ledger: &kafkaspec.Ledger{Reader: c, Namespace: "op"}, Namespaces: []string{"watched"}}
	names, err := queues.Names(ctx, "elsewhere")
	if err != nil || len(names) != 0 {
		t.Fatalf("Names outside the watched namespaces: %v, %v; want none, no error", names, err)
	}
	if _, err := queues.Get(ctx, "elsewhere", "q"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get outside the watched namespaces: %v, want NotFound", err)
	}
	if names, err := queues.Names(ctx, "watched"); err != nil || len(names) != 0 {
		t.Fatalf("Names in the watched namespace: %v, %v", names, err)
	}
}

// TestClientQueuesServeNoTopicTheClaimPolicyRefuses: a queue whose ledger record holds another
// namespace's topic (recorded before the manager ran with --topic-prefix '{namespace}.') serves
// none of its records once the policy gives the topic to that namespace.
func TestClientQueuesServeNoTopicTheClaimPolicyRefuses(t *testing.T) {
	ctx := context.Background()
	q := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "squat", UID: "uid-squat"},
		Spec: retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: "victim.billing-dlq"}}}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(q).Build()
	if err := (&kafkaspec.Ledger{Reader: c, Writer: c, Namespace: "op"}).Record(ctx, q, "victim.billing-dlq"); err != nil {
		t.Fatal(err)
	}
	queues := &dlqapi.ClientQueues{Reader: c, Secrets: c, Ledger: &kafkaspec.Ledger{Reader: c, Namespace: "op"},
		Defaults: kafkaspec.Defaults{BootstrapServers: []string{"kafka:9092"}, Tenancy: kafkaspec.Tenancy{TopicPrefix: "{namespace}."}}}
	_, err := queues.Get(ctx, "tenant", "squat")
	var notOwned *dlqapi.NotOwnedError
	if !errors.As(err, &notOwned) {
		t.Fatalf("a queue holding another namespace's topic under the claim policy: %v, want NotOwnedError", err)
	}
	t.Log(err)
}
