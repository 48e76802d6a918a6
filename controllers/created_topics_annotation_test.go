package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// createdTopicsAnnotation is where the operator recorded created topics before the topic ledger; a
// resource's author can write it.
const createdTopicsAnnotation = "retry.retryops.dev/created-topics"

// TestACreatedTopicsAnnotationGainsNothing: under --topic-prefix '{namespace}.', a tenant annotates
// its pipeline (deletionPolicy Delete) with another namespace's topic that holds records, and its
// queue (a count limit, Delete, Adopt) names that namespace's dead-letter topic and is annotated
// with it. The manager reconciling them starts after they were created, on a ledger it has never
// used, and is then restarted. Whatever the annotation says, the pipeline's dispatchers do not
// consume the other's topic nor does the manager delete it; the queue is refused by the claim
// policy, trims nothing, is not what the deadletters API serves that topic for (the ledger does not
// record it for the queue) and its deletion keeps the topic.
func TestACreatedTopicsAnnotationGainsNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	adm := newKadm(t)
	victim, tenant := newNamespace(t), newNamespace(t)
	// The ledger of this test's managers: new, as on an install whose manager meets these
	// resources only after their creation.
	ledgerNS := newNamespace(t)
	payments, billing := victim+".payments", victim+".billing-dlq"
	for _, topic := range []string{payments, billing} {
		createTopic(t, adm, topic, 1)
		produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 3})
	}

	labels := map[string]string{benchmarkLabel: "true"}
	own := newDLQ(tenant, "dlq", tenant+".dlq")
	own.Labels = labels
	stolen := newDLQ(tenant, "stolen", billing)
	stolen.Labels = labels
	stolen.Annotations = map[string]string{createdTopicsAnnotation: billing + "," + billing + ".state"}
	stolen.Spec.Topic.Partitions = 1
	stolen.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
	stolen.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxMessages: ptr.To(int64(1))}
	stolen.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, backoffPolicy(tenant, "p", 2, time.Second, time.Minute))).To(Succeed())
	p := newPipeline(tenant, "orders", tenant+".orders", "p", "dlq")
	p.Labels = labels
	p.Annotations = map[string]string{createdTopicsAnnotation: tenant + ".orders," + payments}
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	for _, o := range []client.Object{own, stolen, p} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}

	// The manager starts a minute after the resources were made, and restarts a minute later.
	created := time.Now()
	start := func(after time.Duration) (*controllers.DeadLetterQueueReconciler, *controllers.ConsumerPipelineReconciler) {
		return isolatedReconcilers(t, controllers.Options{
			Clock:                   clocktesting.NewFakePassiveClock(created.Add(after)),
			Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
			DefaultBootstrapServers: broker.ListenAddrs(),
			StatusRefreshInterval:   resyncInterval,
			KafkaTenancy:            kafkaspec.Tenancy{TopicPrefix: "{namespace}."},
			OperatorNamespace:       ledgerNS,
		})
	}
	ledger := &kafkaspec.Ledger{Reader: env.Client, Writer: env.Client, Namespace: ledgerNS}
	recordOf := func(o client.Object) func() ([]string, error) {
		return func() ([]string, error) {
			cm := &corev1.ConfigMap{}
			err := env.Client.Get(ctx, client.ObjectKey{Namespace: ledgerNS, Name: "topics-" + string(o.GetUID())}, cm)
			return parseTopics(cm.Data["topics"]), client.IgnoreNotFound(err)
		}
	}
	check := func(qr *controllers.DeadLetterQueueReconciler, pr *controllers.ConsumerPipelineReconciler, when string) {
		t.Helper()
		reconciled := func(r interface {
			Reconcile(context.Context, ctrl.Request) (ctrl.Result, error)
		}, o client.Object, cond func() (*metav1.Condition, error)) func() (*metav1.Condition, error) {
			return func() (*metav1.Condition, error) {
				_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)})
				return cond()
			}
		}
		g.Eventually(reconciled(qr, own, dlqReady(own)), wait, poll).Should(isReady(), when)
		g.Eventually(reconciled(qr, stolen, dlqReady(stolen)), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicClaimRefused),
			HaveField("Message", ContainSubstring(billing))), when)
		g.Eventually(reconciled(pr, p, pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)), wait, poll).Should(isReady(), when)
		for range 3 {
			_, _ = pr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
		g.Expect(dispatcherTopics(p)()).To(Equal(configTopics{Retries: []string{tenant + ".orders.retry.1"}}),
			"%s: the pipeline's dispatchers consume %s", when, payments)
		g.Expect(pipelineTopicsOf(p)()).To(HaveField("UnusedRetries", BeEmpty()), when)
		g.Expect(recordOf(p)()).To(Equal([]string{tenant + ".orders", tenant + ".orders.retry.1"}), when)
		g.Expect(recordOf(stolen)()).To(BeEmpty(), when)
		g.Expect(ledger.Recorded(ctx, stolen, billing)).To(BeFalse(), "%s: the deadletters API would serve %s for the tenant's queue", when, billing)
		for _, topic := range []string{payments, billing} {
			g.Expect(held(adm, topic)()).To(Equal(int64(3)), "%s: %s", when, topic)
		}
	}
	qr, pr := start(time.Minute)
	check(qr, pr, "first start")

	// As if the tenant's pods had consumed the other's topic: the manager would find it drained.
	commitOffsets(t, adm, tenant+".orders", map[string]map[int32]int64{payments: {0: 3}})
	rollOut(t, p)
	qr, pr = start(2 * time.Minute)
	check(qr, pr, "after a restart")
	g.Expect(describe(adm, payments)()).To(HaveField("Exists", true))

	for _, o := range []client.Object{stolen, p} {
		g.Expect(env.Client.Delete(ctx, o)).To(Succeed())
	}
	g.Eventually(func() bool {
		_, _ = qr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stolen)})
		_, _ = pr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		return gone(stolen)() && gone(p)()
	}, wait, poll).Should(BeTrue())
	for _, topic := range []string{payments, billing} {
		g.Expect(describe(adm, topic)()).To(HaveField("Exists", true), topic)
		g.Expect(held(adm, topic)()).To(Equal(int64(3)), topic)
	}
	g.Expect(describe(adm, tenant+".orders.retry.1")()).To(HaveField("Exists", false), "the pipeline's own tier goes (Delete)")
}

// parseTopics splits a ledger record's topics (one per line) into names.
func parseTopics(v string) []string {
	var out []string
	for _, n := range strings.Split(v, "\n") {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}
