package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// startStoppableManager runs a manager of its own under tenancy for the objects labelled
// benchmarkLabel=label, as startTenancyManager does, and returns what stops it and waits until it
// has stopped: one manager after another over the same objects is a manager restart.
func startStoppableManager(t *testing.T, label string, tenancy kafkaspec.Tenancy) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cacheOpts := controllers.CacheOptions(nil)
	cacheOpts.DefaultLabelSelector = labels.SelectorFromSet(map[string]string{benchmarkLabel: label})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     envtestutil.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cacheOpts,
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			return client.New(cfg, opts)
		},
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		StatusRefreshInterval:   resyncInterval,
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		KafkaTenancy:            tenancy,
	}); err != nil {
		cancel()
		t.Fatal(err)
	}
	done := runManager(ctx, mgr)
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// A queue that made another namespace's topic before the manager ran with a claim policy holds it
// in the topic ledger. Once the policy refuses it, the queue holds nothing: it is refused, naming
// the rule, like a queue that never had the topic, rather than go on managing (trimming,
// reconfiguring, serving, deleting) a topic the policy gives another namespace.
func TestAQueueRefusedAfterThePolicyTightensHoldsNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	tenant, victim := newNamespace(t), newNamespace(t)
	stop := startStoppableManager(t, tenant, kafkaspec.Tenancy{})

	squat := newDLQ(tenant, "squat", victim+".billing-dlq")
	squat.SetLabels(map[string]string{benchmarkLabel: tenant})
	g.Expect(env.Client.Create(ctx, squat)).To(Succeed())
	t.Cleanup(func() { letGo(t, squat) })
	g.Eventually(dlqReady(squat), wait, poll).Should(isReady(), "no policy: any name")
	g.Eventually(ledgerOf(squat), wait, poll).Should(ContainElement(victim + ".billing-dlq"))
	createTopic(t, newKadm(t), tenant+".orders", 1)
	policy := backoffPolicy(tenant, "p", 2, time.Second, time.Minute)
	writer := newPipeline(tenant, "writer", tenant+".orders", "p", "squat")
	for _, o := range []client.Object{policy, writer} {
		o.SetLabels(map[string]string{benchmarkLabel: tenant})
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}
	g.Eventually(pipelineCondition(writer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady(), "its dead letters go to the queue's topic")

	// The operator turns the claim policy on: a restart with --topic-prefix '{namespace}.'.
	stop()
	startStoppableManager(t, tenant, kafkaspec.Tenancy{TopicPrefix: "{namespace}."})
	// A spec change, so that the condition read is the new manager's.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(squat), squat)).To(Succeed())
	squat.Spec.Topic.Partitions = 4
	squat.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Update(ctx, squat)).To(Succeed())
	g.Eventually(dlqReady(squat), wait, poll).Should(notReady(retryv1alpha1.ReasonTopicClaimRefused))
	g.Expect(describe(newKadm(t), victim+".billing-dlq")()).To(HaveField("Partitions", 3), "left unchanged")

	// No pipeline sends dead letters there.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(writer), writer)).To(Succeed())
	writer.Spec.Sink.URI = "http://sink.example:8081/"
	g.Expect(env.Client.Update(ctx, writer)).To(Succeed())
	g.Eventually(pipelineCondition(writer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(notReady(retryv1alpha1.ReasonTopicClaimRefused))

	// No action runs on it: it would decide on, trim or replay the other namespace's dead letters.
	resolve := newAction(tenant, "resolve", "squat", retryv1alpha1.DeadLetterResolve, nil)
	resolve.Spec.Note = "done"
	resolve.SetLabels(map[string]string{benchmarkLabel: tenant})
	g.Expect(env.Client.Create(ctx, resolve)).To(Succeed())
	t.Cleanup(func() { letGo(t, resolve) })
	g.Eventually(actionReady(resolve), wait, poll).Should(notReady(retryv1alpha1.ReasonTopicClaimRefused))

	// Deleted under Delete, it leaves the topic (the policy gives it to the other namespace).
	g.Expect(env.Client.Delete(ctx, squat)).To(Succeed())
	g.Eventually(func() error { return env.Client.Get(ctx, client.ObjectKeyFromObject(squat), squat) }, wait, poll).Should(MatchError(ContainSubstring("not found")))
	g.Expect(describe(newKadm(t), victim+".billing-dlq")()).To(HaveField("Exists", true), "the topic is kept")
}

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
