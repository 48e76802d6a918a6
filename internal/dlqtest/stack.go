// Package dlqtest starts, for the tests of the dead-letter surfaces (the kubectl plugin and its
// console), the whole server side in one process: envtest's kube-apiserver configured for
// aggregation, an in-memory Kafka (kfake), and a manager that runs the controllers and serves the
// deadletters API as cmd/manager wires them, reached by the aggregator through
// devenv.RegisterDeadLettersAPI. Only tests import it.
package dlqtest

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// Stack is the running server side.
type Stack struct {
	// Env is the control plane; Env.Client an admin client of it.
	Env *envtestutil.Env
	// Broker is the in-memory Kafka.
	Broker *kfake.Cluster
	// Kafka is the manager's Kafka client factory.
	Kafka *franz.Factory
}

// Start starts the stack (Kafka holding seedTopics, one partition each) until the test ends; ctx
// bounds the manager.
func Start(ctx context.Context, t testing.TB, seedTopics ...string) *Stack {
	t.Helper()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, seedTopics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	factory := franz.NewFactory(franz.WithRequestTimeout(30 * time.Second))
	t.Cleanup(factory.Close)
	env, err := envtestutil.StartAggregated()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c := env.Client

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controllers.CacheOptions(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{StatusRefreshInterval: time.Second, Kafka: factory,
		DefaultBootstrapServers: broker.ListenAddrs()}); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := devenv.RegisterDeadLettersAPI(ctx, c, int32(lis.Addr().(*net.TCPAddr).Port)); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Add(dlqapi.NewServer(dlqapi.Options{Listener: lis, Config: env.Config,
		Certs: &dlqapi.CertManager{Client: c, Namespace: envtestutil.OperatorNamespace, SecretName: "retry-operator-deadletters-api-tls",
			Service: devenv.DeadLettersAPIService},
		Storage: &dlqapi.Storage{Queues: &dlqapi.ClientQueues{Reader: c, Secrets: c, Defaults: kafkaspec.Defaults{BootstrapServers: broker.ListenAddrs()},
			Ledger: &kafkaspec.Ledger{Reader: c, Namespace: envtestutil.OperatorNamespace}}, Kafka: factory},
	})); err != nil {
		t.Fatal(err)
	}
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	t.Cleanup(func() { stop(); <-done })
	return &Stack{Env: env, Broker: broker, Kafka: factory}
}

// Queue creates namespace ns and a DeadLetterQueue name on topic (two partitions) in it, and waits
// until the queue is Ready with its record of decisions.
func (s *Stack) Queue(ctx context.Context, t testing.TB, ns, name, topic string) *retryv1alpha1.DeadLetterQueue {
	t.Helper()
	c := s.Env.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	q := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: retryv1alpha1.TopicName(topic), Partitions: 2}}}
	if err := c.Create(ctx, q); err != nil {
		t.Fatal(err)
	}
	gomega.NewWithT(t).Eventually(func(g gomega.Gomega) {
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(q), q)).To(gomega.Succeed())
		g.Expect(meta.IsStatusConditionTrue(q.Status.Conditions, retryv1alpha1.ConditionReady) && q.Status.StateTopic != "").To(gomega.BeTrue(),
			"the queue is Ready with its record of decisions: %+v", q.Status.Conditions)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(100 * time.Millisecond).Should(gomega.Succeed())
	return q
}
