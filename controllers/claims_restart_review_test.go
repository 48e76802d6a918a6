package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// newerOnOtherCluster makes two pipelines in one consumer group on two clusters: the older on a
// second in-process cluster, the newer on the suite's. The newer runs (they are different clusters).
func newerOnOtherCluster(t *testing.T, label string) (older, newer *retryv1alpha1.ConsumerPipeline, other func()) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := newNamespace(t), newKadm(t)
	own := map[string]string{benchmarkLabel: label}
	dlq := newDLQ(ns, "dlq", ns+".dlq")
	dlq.SetLabels(own)
	policy := backoffPolicy(ns, "p", 2, time.Second, time.Minute)
	policy.SetLabels(own)
	g.Expect(env.Client.Create(ctx, dlq)).To(Succeed())
	g.Expect(env.Client.Create(ctx, policy)).To(Succeed())
	t.Cleanup(func() { letGo(t, dlq) })
	g.Eventually(dlqReady(dlq), wait, poll).Should(isReady())
	createTopic(t, adm, ns+".b", 1)
	x := newOtherCluster(t, "cluster-x")
	createTopic(t, newKadm(t, x.ListenAddrs()...), ns+".a", 1)

	older = newPipeline(ns, "a-older", ns+".a", "p", "dlq")
	older.Spec.Source.ConsumerGroup = ns + ".shared"
	older.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: x.ListenAddrs()}
	older.SetLabels(own)
	g.Expect(env.Client.Create(ctx, older)).To(Succeed())
	t.Cleanup(func() { letGo(t, older) })
	g.Eventually(func() bool { return metav1.Now().Unix() > older.CreationTimestamp.Unix() }, wait, poll).Should(BeTrue())

	newer = newPipeline(ns, "b-newer", ns+".b", "p", "dlq")
	newer.Spec.Source.ConsumerGroup = ns + ".shared"
	newer.SetLabels(own)
	g.Expect(env.Client.Create(ctx, newer)).To(Succeed())
	t.Cleanup(func() { letGo(t, newer) })
	return older, newer, x.Close
}

// A pipeline running on its cluster, in a consumer group an older pipeline on another cluster
// joins, keeps running when that other cluster goes down and the manager restarts: the manager
// found the clusters different, and neither changed its cluster or group. An outage of someone else's cluster
// must not stop it.
func TestARestartDuringAnotherClustersOutageLeavesARunningPipelineRunning(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	label := newNamespace(t)
	stop := startStoppableManager(t, label, kafkaspec.Tenancy{})
	older, newer, closeOther := newerOnOtherCluster(t, label)
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady(), "two clusters, told apart")
	clusterID := func(p *retryv1alpha1.ConsumerPipeline) func() (string, error) {
		return func() (string, error) {
			err := env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)
			return p.Status.KafkaClusterID, err
		}
	}
	g.Eventually(clusterID(older), wait, poll).Should(Equal("cluster-x"), "each records the cluster its connection reached")
	g.Eventually(clusterID(newer), wait, poll).Should(SatisfyAll(Not(BeEmpty()), Not(Equal("cluster-x"))))

	closeOther()
	stop()
	startStoppableManager(t, label, kafkaspec.Tenancy{})
	// A spec change of the newer alone, so that the condition read is the new manager's.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(newer), newer)).To(Succeed())
	newer.Spec.Sink.URI = "http://sink.example:8081/"
	g.Expect(env.Client.Update(ctx, newer)).To(Succeed())
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(Not(BeNil()))
	c, err := pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady)()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(c.Status)+" "+c.Reason+": "+c.Message).To(HavePrefix("True "), "still running on its own cluster")
}

// newOtherCluster is a second in-process Kafka whose cluster ID is id (the suite's is kfake's
// default), closed at the end of the test.
func newOtherCluster(t *testing.T, id string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.ClusterID(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
