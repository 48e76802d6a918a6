package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
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
