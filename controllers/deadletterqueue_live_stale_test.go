package controllers_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// pausable makes every request c receives fail while paused is set, as a broker that stopped
// answering would.
func pausable(c *kfake.Cluster) *atomic.Bool {
	paused := &atomic.Bool{}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if paused.Load() {
			return nil, errors.New("paused"), true
		}
		return nil, nil, false
	})
	return paused
}

// A queue whose broker stops answering cannot say whether a threshold is crossed: once its figures
// are older than two refresh intervals, Healthy is Unknown (reason FiguresStale, saying when they
// were read), not True on figures nobody can read; when the broker answers again it is True again.
func TestHealthyIsUnknownWhileTheFiguresCannotBeRead(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := ownBroker(t, ns)
	paused := pausable(c)
	q := newDLQ(ns, "dlq", "stale.dlq")
	q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: c.ListenAddrs()}
	q.Spec.StatusRefreshInterval = &metav1.Duration{Duration: time.Second}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqHealthy(q), wait, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonHealthy)))

	paused.Store(true)
	g.Eventually(dlqReady(q), wait, poll).Should(notReady(retryv1alpha1.ReasonKafkaUnavailable))
	g.Eventually(dlqHealthy(q), wait, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionUnknown),
		HaveField("Reason", retryv1alpha1.ReasonFiguresStale), HaveField("Message", ContainSubstring("last read at"))))

	paused.Store(false)
	g.Eventually(dlqHealthy(q), wait, poll).Should(And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue), HaveField("Reason", retryv1alpha1.ReasonHealthy)))
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
}

// ownBroker is a kfake cluster of one broker for the queues of namespace ns alone. The queues go
// before their broker: left behind, they would keep the suite manager's workers busy retrying a
// closed broker for the rest of the run.
func ownBroker(t *testing.T, ns string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		_ = env.Client.DeleteAllOf(context.Background(), &retryv1alpha1.DeadLetterQueue{}, client.InNamespace(ns))
	})
	return c
}
