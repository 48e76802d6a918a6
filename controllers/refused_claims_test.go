package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
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

// startTenancyManager runs a manager of its own under tenancy, as startOwnManager does, for the
// objects labelled benchmarkLabel=label in any namespace (the suite manager ignores them).
func startTenancyManager(t *testing.T, ctx context.Context, label string, tenancy kafkaspec.Tenancy) {
	t.Helper()
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
		t.Fatal(err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		StatusRefreshInterval:   resyncInterval,
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		KafkaTenancy:            tenancy,
	}); err != nil {
		t.Fatal(err)
	}
	done := runManager(ctx, mgr)
	t.Cleanup(func() { <-done })
}

// Under --topic-prefix '{namespace}.', a tenant's pipeline joining another namespace's consumer
// group and its queue for another namespace's topic are refused; and a refused claim holds nothing:
// the other namespace's own pipeline and queue, created later, get the group and the topic.
func TestARefusedClaimHoldsNothing(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	tenant, victim := newNamespace(t), newNamespace(t)
	startTenancyManager(t, ctx, tenant, kafkaspec.Tenancy{TopicPrefix: "{namespace}."})
	t.Cleanup(cancel)
	adm := newKadm(t)
	createTopic(t, adm, tenant+".orders", 1)
	createTopic(t, adm, victim+".orders", 1)
	create := func(o client.Object) {
		t.Helper()
		o.SetLabels(map[string]string{benchmarkLabel: tenant})
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}

	squatQueue := newDLQ(tenant, "squat", victim+".billing-dlq")
	create(squatQueue)
	create(newDLQ(tenant, "own", tenant+".dlq"))
	create(backoffPolicy(tenant, "p", 2, time.Second, time.Minute))
	squatter := newPipeline(tenant, "squatter", tenant+".orders", "p", "own")
	squatter.Spec.Source.ConsumerGroup = victim + ".billing"
	create(squatter)
	g.Eventually(dlqReady(squatQueue), wait, poll).Should(notReady(retryv1alpha1.ReasonTopicClaimRefused))
	g.Eventually(pipelineCondition(squatter, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(notReady(retryv1alpha1.ReasonConsumerGroupClaimRefused))
	// The rightful ones come strictly later (creation timestamps have a one-second resolution).
	g.Eventually(func() bool { return metav1.Now().Unix() > squatter.CreationTimestamp.Unix() }, wait, poll).Should(BeTrue())

	queue := newDLQ(victim, "billing-dlq", victim+".billing-dlq")
	create(queue)
	create(backoffPolicy(victim, "p", 2, time.Second, time.Minute))
	billing := newPipeline(victim, "billing", victim+".orders", "p", "billing-dlq")
	create(billing)
	g.Eventually(dlqReady(queue), wait, poll).Should(isReady(), "the queue's own topic, which no refused claim holds")
	g.Eventually(pipelineCondition(billing, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady(), "the namespace's own group")
	g.Eventually(func() (*appsv1.Deployment, error) { return consumers(billing) }, wait, poll).Should(HaveField("Spec.Replicas", Equal(ptr.To(int32(1)))))
	g.Expect(pipelineCondition(squatter, retryv1alpha1.ConditionTopicsReady)()).To(notReady(retryv1alpha1.ReasonConsumerGroupClaimRefused), "still refused")
	g.Expect(dlqReady(squatQueue)()).To(notReady(retryv1alpha1.ReasonTopicClaimRefused), "still refused")
}
