package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// claimsReconciler returns a ConsumerPipeline reconciler under tenancy (isolatedReconcilers).
func claimsReconciler(t *testing.T, tenancy kafkaspec.Tenancy) *controllers.ConsumerPipelineReconciler {
	t.Helper()
	_, p := isolatedReconcilers(t, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
		KafkaTenancy:            tenancy,
	})
	return p
}

// isolatedReconcilers returns DeadLetterQueue and ConsumerPipeline reconcilers with opts, on an
// uncached client that shows no other pipeline or queue claiming anything (the claim indexes live
// in the suite manager's cache), for tests that reconcile their own labelled objects (benchmarkLabel)
// by calling Reconcile.
func isolatedReconcilers(t *testing.T, opts controllers.Options) (*controllers.DeadLetterQueueReconciler, *controllers.ConsumerPipelineReconciler) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	c := interceptor.NewClient(direct, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			switch list.(type) {
			case *retryv1alpha1.DeadLetterQueueList, *retryv1alpha1.ConsumerPipelineList:
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	q, p, err := controllers.NewReconcilers(mgr, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return q, p
}

// consumers returns the pipeline's consumer Deployment, nil when there is none.
func consumers(p *retryv1alpha1.ConsumerPipeline) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: p.Namespace, Name: render.DeploymentName(p)}, d)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return d, err
}

// Under --topic-prefix '{namespace}.', the source topic a pipeline reads and the consumer group it
// joins are claims like the topics it makes: a pipeline of one attempt (no retry topic to make) on
// another team's topic, or joining another application's group, is refused (TopicsReady False,
// TopicClaimRefused or ConsumerGroupClaimRefused, naming the rule), gets no consumer Deployment
// and shows no figure of the topic; a pipeline that ran before the policy is scaled to zero.
func TestClaimPolicyCoversWhatAPipelineReadsAndTheGroupItJoins(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	adm := newKadm(t)
	g.Eventually(dlqReady(dlq), wait, poll).Should(isReady())
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "once", 1, time.Second, time.Second))).To(Succeed())
	payments := "payments-" + ns // another team's topic, outside the namespace's prefix
	createTopic(t, adm, payments, 1)
	produce(t, broker.ListenAddrs(), payments, map[int32]int{0: 50})
	orders := ns + ".orders"
	createTopic(t, adm, orders, 1)

	tenancy := kafkaspec.Tenancy{TopicPrefix: "{namespace}."}
	r := claimsReconciler(t, tenancy)
	reconcile := func(p *retryv1alpha1.ConsumerPipeline) {
		for range 3 {
			_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	}
	newClaimsPipeline := func(name, source, group string) *retryv1alpha1.ConsumerPipeline {
		p := newPipeline(ns, name, source, "once", "dlq")
		p.Spec.Source.ConsumerGroup = group
		p.Labels = map[string]string{benchmarkLabel: "true"}
		g.Expect(env.Client.Create(ctx, p)).To(Succeed())
		t.Cleanup(func() { letGo(t, p) })
		return p
	}
	refused := func(p *retryv1alpha1.ConsumerPipeline, reason, what string) {
		t.Helper()
		topics := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady)
		d, err := consumers(p)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(topics).To(And(Not(BeNil()), HaveField("Status", BeEquivalentTo("False")), HaveField("Reason", reason),
			HaveField("Message", And(ContainSubstring(what), ContainSubstring("--topic-prefix")))),
			"%s: TopicsReady %+v, consumer lag %v, Deployment %v", p.Name, topics, ptr.Deref(p.Status.ConsumerLag, -1), d != nil)
		g.Expect(p.Status.ConsumerLag).To(BeNil(), "no figure of a topic it may not read")
		g.Expect(p.Status.RetryBacklog).To(BeNil())
		g.Expect(d).To(Or(BeNil(), HaveField("Spec.Replicas", Equal(ptr.To(int32(0))))), "no consumer runs")
	}

	// Reading another team's topic, under the namespace's own group.
	reader := newClaimsPipeline("reader", payments, "")
	reconcile(reader)
	refused(reader, retryv1alpha1.ReasonTopicClaimRefused, fmt.Sprintf("%q", payments))
	g.Expect(consumers(reader)).To(BeNil(), "never created")

	// Joining another application's consumer group, on the namespace's own topic.
	joiner := newClaimsPipeline("joiner", orders, "payments-service")
	reconcile(joiner)
	refused(joiner, retryv1alpha1.ReasonConsumerGroupClaimRefused, `"payments-service"`)
	g.Expect(consumers(joiner)).To(BeNil(), "never created")

	// A pipeline that ran before the claim policy: its Deployment is scaled to zero.
	before := newClaimsPipeline("before", payments, ns+".before")
	open := claimsReconciler(t, kafkaspec.Tenancy{})
	g.Eventually(func() (*appsv1.Deployment, error) {
		_, _ = open.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(before)})
		return consumers(before)
	}, wait, poll).Should(HaveField("Spec.Replicas", Equal(ptr.To(int32(1)))))
	g.Eventually(func() (*int64, error) {
		_, _ = open.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(before)})
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(before), before)
		return before.Status.ConsumerLag, err
	}, wait, poll).Should(Equal(ptr.To(int64(50))), "without a claim policy it reads the topic")
	reconcile(before)
	refused(before, retryv1alpha1.ReasonTopicClaimRefused, fmt.Sprintf("%q", payments))
	g.Expect(consumers(before)).To(HaveField("Spec.Replicas", Equal(ptr.To(int32(0)))))

	// The namespace's own topic and group: allowed.
	mine := newClaimsPipeline("mine", orders, "")
	reconcile(mine)
	g.Expect(meta.FindStatusCondition(mine.Status.Conditions, retryv1alpha1.ConditionTopicsReady)).To(isReady())
	g.Expect(consumers(mine)).To(HaveField("Spec.Replicas", Equal(ptr.To(int32(1)))))
}
