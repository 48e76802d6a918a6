package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

// topicRecords are what a test compares of a topic's records: per partition, the start and end
// offsets and every record's key, value and headers.
type topicRecords map[int32]string

// readTopic reads every record of topic (a fresh consumer, from the start) and its offsets.
func readTopic(t *testing.T, adm *testKafka, topic string) topicRecords {
	t.Helper()
	starts, err := adm.ListStartOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := topicRecords{}
	for p, o := range ends[topic] {
		out[p] = fmt.Sprintf("offsets %d..%d", starts[topic][p].Offset, o.Offset)
	}
	for _, r := range consumeAll(t, adm, topic) {
		out[r.Partition] += fmt.Sprintf("|%d %s=%s %v", r.Offset, r.Key, r.Value, r.Headers)
	}
	return out
}

// consumeAll reads every record topic holds now, with a fresh consumer from the start.
func consumeAll(t *testing.T, adm *testKafka, topic string) []*kgo.Record {
	t.Helper()
	n, err := held(adm, topic)()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*kgo.Record
	for int64(len(out)) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// A tenant's DeadLetterQueue naming a topic the operator did not create (here another team's
// "payments"), with the created-topics annotation forged, a partition count, configs, a count
// limit and deletionPolicy Delete: the topic's configs, partitions, records and existence are
// unchanged through reconciles and the queue's deletion, which reports why. A pipeline sending
// dead letters to that queue sends none there.
func TestDeadLetterQueueNeverTouchesATopicItDidNotCreate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	topic := ns + "-payments"
	_, err := adm.CreateTopic(ctx, 2, -1, map[string]*string{"retention.ms": ptr.To("86400000")}, topic)
	g.Expect(err).NotTo(HaveOccurred())
	produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 6, 1: 4})
	before := readTopic(t, adm, topic)
	g.Expect(describe(adm, topic)()).To(Equal(topicState{Exists: true, Partitions: 2, Configs: map[string]string{"retention.ms": "86400000"}}))

	q := newDLQ(ns, "stolen", topic)
	q.Annotations = map[string]string{createdTopicsAnnotation: topic} // forged
	q.Spec.Topic.Partitions = 6
	q.Spec.Topic.Config = map[string]string{"cleanup.policy": "compact"}
	q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxMessages: ptr.To(int64(1))}
	q.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicNotOwned),
		HaveField("Message", And(ContainSubstring(topic), ContainSubstring("existingTopic: Adopt")))))
	g.Expect(q.Status.Messages).To(BeNil(), "the topic's records are not read")
	g.Expect(describe(adm, topic+".state")()).To(HaveField("Exists", false), "no record of decisions is made for it")

	p := newPipeline(ns, "orders", ns+".orders", "chatbot", q.Name)
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicNotOwned),
		HaveField("Message", ContainSubstring(topic))))
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "orders-dispatcher"}, &corev1.ConfigMap{})).NotTo(Succeed(),
		"no dispatcher config names the topic as its dead letter topic")

	// A Purge of that queue's dead letters is refused: it would delete another team's records.
	purge := newAction(ns, "purge", q.Name, retryv1alpha1.DeadLetterPurge, &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: time.Now().Add(time.Hour)}})
	g.Expect(env.Client.Create(ctx, purge)).To(Succeed())
	g.Eventually(actionReady(purge), wait, poll).Should(And(Not(BeNil()), HaveField("Reason", retryv1alpha1.ReasonTopicNotOwned)))
	g.Expect(purge.Status.Phase).To(Equal(retryv1alpha1.ActionPending))

	// Three spec changes, each reconciled (the condition follows the generation).
	for i := range 3 {
		update(t, q, func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Retention.MaxMessages = ptr.To(int64(i + 2)) })
		g.Eventually(dlqReady(q), wait, poll).Should(notReady(retryv1alpha1.ReasonTopicNotOwned))
	}
	g.Expect(describe(adm, topic)()).To(Equal(topicState{Exists: true, Partitions: 2, Configs: map[string]string{"retention.ms": "86400000"}}))
	g.Expect(readTopic(t, adm, topic)).To(Equal(before))

	g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
	g.Eventually(gone(q), wait, poll).Should(BeTrue())
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Reason", "TopicKept"), HaveField("Note", ContainSubstring("did not create")))))
	g.Expect(describe(adm, topic)()).To(Equal(topicState{Exists: true, Partitions: 2, Configs: map[string]string{"retention.ms": "86400000"}}))
	g.Expect(readTopic(t, adm, topic)).To(Equal(before))
}

// A queue created for a topic the operator then created keeps it through an annotation wipe (the
// record is the ledger, in the manager's namespace) and deletes it under Delete; adopting an
// existing topic takes it over; the ledger's record goes with the queue.
func TestDeadLetterQueueOwnsWhatItCreatedOrAdopted(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)

	created := newDLQ(ns, "created", ns+".created")
	created.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, created)).To(Succeed())
	g.Eventually(dlqReady(created), wait, poll).Should(isReady())
	ledger := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(created.UID)}, ledger)).To(Succeed())
	g.Expect(ledger.Data).To(HaveKeyWithValue("topics", ns+".created\n"+ns+".created.state"))
	// The record of decisions is made beside it, compacted, and named in status.
	g.Expect(created.Status.StateTopic).To(Equal(ns + ".created.state"))
	g.Expect(describe(adm, ns+".created.state")()).To(And(HaveField("Partitions", 1), HaveField("Configs", HaveKeyWithValue("cleanup.policy", "compact"))))
	update(t, created, func(q *retryv1alpha1.DeadLetterQueue) { q.Annotations = map[string]string{"unrelated": "x"} })

	existing := ns + ".existing"
	createTopic(t, adm, existing, 2)
	adopted := newDLQ(ns, "adopted", existing)
	adopted.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
	adopted.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, adopted)).To(Succeed())
	g.Eventually(dlqReady(adopted), wait, poll).Should(isReady())
	g.Eventually(describe(adm, existing), wait, poll).Should(HaveField("Partitions", 3), "an adopted topic is managed")
	g.Eventually(eventsFor(ns, adopted.Name), wait, poll).Should(ContainElement(HaveField("Reason", "TopicAdopted")))

	for _, q := range []*retryv1alpha1.DeadLetterQueue{created, adopted} {
		g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
		g.Eventually(gone(q), wait, poll).Should(BeTrue())
		g.Expect(describe(adm, string(q.Spec.Topic.Name))()).To(HaveField("Exists", false))
		g.Expect(describe(adm, string(q.Spec.Topic.Name)+".state")()).To(HaveField("Exists", false))
		// The record goes right after the finalizer (never before: a record dropped while the
		// finalizer stays would disown the topics of a queue that still exists), so it may outlive
		// the object by a moment.
		g.Eventually(func() error {
			return env.Client.Get(ctx, client.ObjectKey{Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(q.UID)}, &corev1.ConfigMap{})
		}, wait, poll).Should(MatchError(ContainSubstring("not found")))
	}
}

// Under a topic claim policy, a queue whose topic is outside its namespace's prefix is refused with
// a message naming the rule, and nothing is created.
func TestTopicClaimPolicy(t *testing.T) {
	g := NewWithT(t)
	err := kafkaspec.Tenancy{TopicPrefix: "{namespace}."}.CheckClaim("team-a", "team-b.orders")
	g.Expect(err).To(MatchError(And(ContainSubstring(`"team-b.orders"`), ContainSubstring("--topic-prefix"), ContainSubstring(`"team-a."`))))
	g.Expect(kafkaspec.Tenancy{TopicPrefix: "{namespace}."}.CheckClaim("team-a", "team-a.orders")).To(Succeed())
	g.Expect(kafkaspec.Tenancy{}.CheckClaim("team-a", "anything")).To(Succeed())
	// What a pipeline reads and the group it joins are claims as well; the group policy defaults to
	// the topic prefix.
	policy := kafkaspec.Tenancy{TopicPrefix: "{namespace}."}
	g.Expect(policy.CheckSourceClaim("team-a", "payments")).To(MatchError(And(ContainSubstring(`source topic "payments"`), ContainSubstring("may read"))))
	g.Expect(policy.CheckSourceClaim("team-a", "team-a.orders")).To(Succeed())
	g.Expect(policy.CheckGroupClaim("team-a", "payments-service")).To(MatchError(And(ContainSubstring(`"payments-service"`), ContainSubstring("--topic-prefix"), ContainSubstring("--group-prefix"))))
	g.Expect(policy.CheckGroupClaim("team-a", "team-a.billing")).To(Succeed())
	groups := "grp-{namespace}-"
	policy.GroupPrefix = &groups
	g.Expect(policy.CheckGroupClaim("team-a", "team-a.billing")).To(MatchError(ContainSubstring(`--group-prefix "grp-{namespace}-"`)))
	g.Expect(policy.CheckGroupClaim("team-a", "grp-team-a-billing")).To(Succeed())
	anyGroup := ""
	policy.GroupPrefix = &anyGroup
	g.Expect(policy.CheckGroupClaim("team-a", "payments-service")).To(Succeed())
	g.Expect(kafkaspec.Tenancy{}.CheckGroupClaim("team-a", "payments-service")).To(Succeed())
	g.Expect(kafkaspec.CheckGroupPrefix("team-{namespace}.")).To(Succeed())
	g.Expect(kafkaspec.CheckGroupPrefix("a\x00")).To(HaveOccurred())
	g.Expect(kafkaspec.CheckTopicPrefix("{namespace}/")).To(HaveOccurred())
	g.Expect(kafkaspec.CheckTopicPrefix("kafka-{namespace}.")).To(Succeed())
}

// Under --topic-prefix '{namespace}.', a queue whose topic is outside its namespace's prefix is
// refused with a message naming the rule, and its topic is not created; one inside is created.
func TestTopicClaimPolicyRefusesATopicOutsideTheNamespacePrefix(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	// A manager for the scheme, the REST mapper and the event recorders; it does not run. The suite
	// manager ignores objects with the benchmark label: only this test reconciles them.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	g.Expect(err).NotTo(HaveOccurred())
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: envtestutil.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	// No other queue claims these topics (the claim index lives in the manager's cache).
	c := interceptor.NewClient(direct, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*retryv1alpha1.DeadLetterQueueList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
	q, _, err := controllers.NewReconcilers(mgr, c, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
		KafkaTenancy:            kafkaspec.Tenancy{TopicPrefix: "{namespace}."},
	})
	g.Expect(err).NotTo(HaveOccurred())

	for _, tc := range []struct {
		topic   string
		allowed bool
	}{{"elsewhere-" + ns, false}, {ns + ".mine", true}} {
		dlq := newDLQ(ns, strings.ReplaceAll(tc.topic, ".", "-"), tc.topic)
		dlq.Labels = map[string]string{benchmarkLabel: "true"}
		g.Expect(env.Client.Create(ctx, dlq)).To(Succeed())
		t.Cleanup(func() { letGo(t, dlq) })
		_, _ = q.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dlq)})
		_, _ = q.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dlq)})
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(dlq), dlq)).To(Succeed())
		ready := meta.FindStatusCondition(dlq.Status.Conditions, retryv1alpha1.ConditionReady)
		g.Expect(describe(adm, tc.topic)()).To(HaveField("Exists", tc.allowed), tc.topic)
		if tc.allowed {
			g.Expect(ready).To(isReady())
			continue
		}
		g.Expect(ready).To(And(notReady(retryv1alpha1.ReasonTopicClaimRefused), HaveField("Message", And(
			ContainSubstring(tc.topic), ContainSubstring("--topic-prefix"), ContainSubstring(`"`+ns+`."`)))))
	}
}
