package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// oneResync is how long a drift may take to be corrected: the next resync comes within
// resyncInterval, plus time for the reconcile itself on a loaded machine.
const oneResync = resyncInterval + 3*time.Second

// newDLQ returns a DeadLetterQueue on the suite broker with 3 partitions.
func newDLQ(ns, name, topic string) *retryv1alpha1.DeadLetterQueue {
	return &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: retryv1alpha1.TopicName(topic), Partitions: 3}},
	}
}

// dlqReady returns the queue's Ready condition for its current generation.
func dlqReady(q *retryv1alpha1.DeadLetterQueue) func() (*metav1.Condition, error) {
	return readyCondition(q, func() []metav1.Condition { return q.Status.Conditions })
}

// isReady matches a True condition; notReady a False one with the reason.
func isReady() OmegaMatcher {
	return And(Not(BeNil()), HaveField("Status", metav1.ConditionTrue))
}

func notReady(reason string) OmegaMatcher {
	return And(Not(BeNil()), HaveField("Status", metav1.ConditionFalse), HaveField("Reason", reason))
}

// gone reports whether the object no longer exists.
func gone(obj client.Object) func() bool {
	return func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return apierrors.IsNotFound(err)
	}
}

func update[T client.Object](t *testing.T, obj T, mutate func(T)) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		mutate(obj)
		return env.Client.Update(context.Background(), obj)
	}, wait, poll).Should(Succeed())
}

func TestDeadLetterQueueCreatesItsTopicAsSpecified(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	topic := ns + ".dlq"
	q := newDLQ(ns, "orders-dlq", topic)
	q.Spec.Topic.Config = map[string]string{"compression.type": "zstd"}
	q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxAge: &metav1.Duration{Duration: 168 * time.Hour}}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())

	g.Eventually(dlqReady(q), wait, poll).Should(And(isReady(), HaveField("Reason", retryv1alpha1.ReasonTopicReady)))
	g.Expect(controllerutil.ContainsFinalizer(q, "retry.retryops.dev/topic")).To(BeTrue())
	g.Expect(q.Status.ObservedGeneration).To(Equal(q.Generation))
	g.Expect(q.Status.Topic).To(Equal(topic))
	g.Expect(q.Status.Partitions).To(Equal(int32(3)))
	g.Expect(q.Status.Messages).To(Equal(ptr.To[int64](0)))

	st, err := describe(adm, topic)()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Partitions).To(Equal(3))
	g.Expect(st.Configs).To(Equal(map[string]string{"compression.type": "zstd", "retention.ms": "604800000"}))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeNormal), HaveField("Reason", "TopicCreated"), HaveField("Note", ContainSubstring(topic)))))

	// Records produced show in status.messages.
	produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 2, 2: 3})
	g.Eventually(func() (*int64, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)
		return q.Status.Messages, err
	}, oneResync, poll).Should(Equal(ptr.To[int64](5)))
	g.Expect(q.Status.LastRefreshTime).NotTo(BeNil())
}

func TestDeadLetterQueueCorrectsDriftWithinOneResync(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	topic := ns + ".dlq"
	q := newDLQ(ns, "drift", topic)
	q.Spec.Topic.Config = map[string]string{"compression.type": "zstd"}
	q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxAge: &metav1.Duration{Duration: time.Hour}}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	want := topicState{Exists: true, Partitions: 3, Configs: map[string]string{"compression.type": "zstd", "retention.ms": "3600000"}}
	g.Expect(describe(adm, topic)()).To(Equal(want))

	t.Run("config changed out of band is set back", func(t *testing.T) {
		g := NewWithT(t)
		_, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
			{Op: kadm.SetConfig, Name: "compression.type", Value: ptr.To("gzip")},
			{Op: kadm.SetConfig, Name: "retention.ms", Value: ptr.To("1000")},
		}, topic)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(describe(adm, topic)()).To(HaveField("Configs", HaveKeyWithValue("compression.type", "gzip")))
		g.Eventually(describe(adm, topic), oneResync, poll).Should(Equal(want))
		g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
			HaveField("Reason", "TopicCorrected"), HaveField("Note", ContainSubstring("compression.type=zstd (was gzip)")))))
	})

	t.Run("a deleted topic is recreated", func(t *testing.T) {
		g := NewWithT(t)
		_, err := adm.DeleteTopic(ctx, topic)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(describe(adm, topic), oneResync, poll).Should(Equal(want))
		g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
			HaveField("Reason", "TopicRecreated"), HaveField("Note", ContainSubstring("recreated")))))
	})

	t.Run("partitions below the spec are added", func(t *testing.T) {
		g := NewWithT(t)
		_, err := adm.DeleteTopic(ctx, topic)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = adm.CreateTopic(ctx, 1, -1, map[string]*string{"compression.type": ptr.To("zstd"), "retention.ms": ptr.To("3600000")}, topic)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(describe(adm, topic), oneResync, poll).Should(Equal(want))
	})

	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
}

func TestDeadLetterQueueRefusesToShrinkPartitions(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	topic := ns + ".dlq"
	q := newDLQ(ns, "shrink", topic)
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())

	// Someone grows the topic beyond the spec: the operator cannot and does not shrink it.
	_, err := adm.CreatePartitions(ctx, 2, topic)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(dlqReady(q), oneResync, poll).Should(And(notReady(retryv1alpha1.ReasonPartitionShrinkRefused),
		HaveField("Message", And(ContainSubstring("has 5 partitions"), ContainSubstring("asks for 3"), ContainSubstring("spec.topic.partitions to 5")))))
	g.Expect(q.Status.Partitions).To(Equal(int32(5)))
	g.Expect(describe(adm, topic)()).To(HaveField("Partitions", 5))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", retryv1alpha1.ReasonPartitionShrinkRefused))))

	// Raising the spec to match accepts them.
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) { q.Spec.Topic.Partitions = 5 })
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	g.Expect(describe(adm, topic)()).To(HaveField("Partitions", 5))
}

func TestDeadLetterQueueTopicConflict(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, other := newNamespace(t), newNamespace(t)
	if other < ns {
		// Creation timestamps have a one-second resolution and ties go to the namespace that sorts
		// first: make that the older queue's, so the test does not depend on the clock.
		ns, other = other, ns
	}
	adm := newKadm(t)
	topic := ns + ".shared"

	first := newDLQ(ns, "a-first", topic)
	first.Spec.Topic.Config = map[string]string{"compression.type": "zstd"}
	g.Expect(env.Client.Create(ctx, first)).To(Succeed())
	g.Eventually(dlqReady(first), wait, poll).Should(isReady())

	// A newer queue, in another namespace, with other settings and the Delete policy.
	second := newDLQ(other, "b-second", topic)
	second.Spec.Topic.Partitions = 6
	second.Spec.Topic.Config = map[string]string{"compression.type": "lz4"}
	second.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, second)).To(Succeed())
	g.Eventually(dlqReady(second), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", ContainSubstring("DeadLetterQueue "+ns+"/a-first"))))
	g.Eventually(eventsFor(other, second.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", retryv1alpha1.ReasonTopicConflict))))

	// The loser never touches the topic, not even over several resyncs, and its deletion leaves it.
	// The loser waits (TopicConflict) and resyncs: its own reconciles pace the check.
	holdsThroughResync(t, second, describe(adm, topic), Equal(
		topicState{Exists: true, Partitions: 3, Configs: map[string]string{"compression.type": "zstd"}}))
	g.Expect(dlqReady(first)()).To(isReady())
	g.Expect(env.Client.Delete(ctx, second)).To(Succeed())
	g.Eventually(gone(second), wait, poll).Should(BeTrue())
	g.Expect(describe(adm, topic)()).To(HaveField("Exists", true))

	// When the owner goes (Retain), a newer claimant takes the topic over only by adopting it: the
	// operator created it for another queue.
	third := newDLQ(other, "c-third", topic)
	third.Spec.Topic.Config = map[string]string{"compression.type": "lz4"}
	third.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
	g.Expect(env.Client.Create(ctx, third)).To(Succeed())
	g.Eventually(dlqReady(third), wait, poll).Should(notReady(retryv1alpha1.ReasonTopicConflict))
	g.Expect(env.Client.Delete(ctx, first)).To(Succeed())
	g.Eventually(gone(first), wait, poll).Should(BeTrue())
	g.Eventually(dlqReady(third), wait, poll).Should(isReady())
	g.Eventually(describe(adm, topic), oneResync, poll).Should(HaveField("Configs", HaveKeyWithValue("compression.type", "lz4")))
}

func TestDeadLetterQueueDeletionPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)

	for _, policy := range []retryv1alpha1.DeletionPolicy{retryv1alpha1.DeletionPolicyDelete, retryv1alpha1.DeletionPolicyRetain} {
		t.Run(string(policy), func(t *testing.T) {
			g := NewWithT(t)
			topic := ns + "." + strings.ToLower(string(policy))
			q := newDLQ(ns, strings.ToLower(string(policy)), topic)
			q.Spec.DeletionPolicy = policy
			g.Expect(env.Client.Create(ctx, q)).To(Succeed())
			g.Eventually(dlqReady(q), wait, poll).Should(isReady())

			g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
			g.Eventually(gone(q), wait, poll).Should(BeTrue())
			st, err := describe(adm, topic)()
			g.Expect(err).NotTo(HaveOccurred())
			if policy == retryv1alpha1.DeletionPolicyDelete {
				g.Expect(st.Exists).To(BeFalse(), "Delete removes the topic")
				g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(HaveField("Reason", "TopicDeleted")))
			} else {
				g.Expect(st.Exists).To(BeTrue(), "Retain keeps the topic")
				g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
					HaveField("Type", corev1.EventTypeNormal), HaveField("Reason", "TopicKept"), HaveField("Note", ContainSubstring(topic)))))
			}
		})
	}
}

func TestDeadLetterQueueDeletionCompletesWithinTheBoundWhenKafkaIsDown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	down, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	addrs := down.ListenAddrs()

	q := newDLQ(ns, "doomed", "doomed")
	q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: addrs}
	q.Spec.DeletionPolicy = retryv1alpha1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())

	down.Close()
	g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)).To(Succeed())
	deleted := q.DeletionTimestamp.Time

	// The bound counts from the deletion timestamp, which has a one-second resolution; no Kafka call
	// runs past it.
	bound := deletionTimeout + 3*time.Second
	g.Eventually(gone(q), bound, poll).Should(BeTrue())
	t.Logf("deleted %v after the deletion timestamp (bound %v)", time.Since(deleted).Round(time.Millisecond), deletionTimeout)
	g.Expect(time.Since(deleted)).To(BeNumerically(">=", deletionTimeout-time.Second), "the operator waited for the broker first")
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", "TopicMayRemain"),
		HaveField("Note", And(ContainSubstring("doomed"), ContainSubstring("may remain"), ContainSubstring(addrs[0]))))))
}

func TestDeadLetterQueueTrimsToMaxMessages(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	topic := ns + ".dlq"
	q := newDLQ(ns, "bounded", topic)
	q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxMessages: ptr.To[int64](10)}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())

	produce(t, broker.ListenAddrs(), topic, map[int32]int{0: 15, 1: 10, 2: 5})
	g.Eventually(held(adm, topic), oneResync, poll).Should(Equal(int64(10)))
	g.Eventually(func() (*int64, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)
		return q.Status.Messages, err
	}, oneResync, poll).Should(Equal(ptr.To[int64](10)))

	// The oldest records of each partition went, in proportion to what each held.
	starts, err := adm.ListStartOffsets(ctx, topic)
	g.Expect(err).NotTo(HaveOccurred())
	got := map[int32]int64{}
	starts.Each(func(o kadm.ListedOffset) { got[o.Partition] = o.Offset })
	g.Expect(got).To(Equal(map[int32]int64{0: 10, 1: 7, 2: 3}))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Reason", "RecordsTrimmed"), HaveField("Note", ContainSubstring("Deleted the 20 oldest")))))
}

func TestDeadLetterQueueReportsAnUnreachableBroker(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	closed, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	addr := closed.ListenAddrs()[0]
	closed.Close()

	q := newDLQ(ns, "nowhere", "nowhere")
	q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{addr}}
	g.Expect(env.Client.Create(context.Background(), q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(retryv1alpha1.ReasonKafkaUnavailable), HaveField("Message", ContainSubstring(addr))))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", retryv1alpha1.ReasonKafkaUnavailable))))

	// Deleting it does not wait for a broker that will never answer longer than the bound.
	g.Expect(env.Client.Delete(context.Background(), q)).To(Succeed())
	g.Eventually(gone(q), deletionTimeout+3*time.Second, poll).Should(BeTrue())
}

// TestAlertRulesSkippedWhileUnchangedStillFollowEveryChange: once a queue's rule ConfigMap was found
// equal (the resyncs that follow no longer render it, apply.OwnedRendered), a spec change is still
// applied, a deleted rule object is made again, a rule object of that name someone else's is a
// conflict at every resync until it goes, and a queue deleted and made again under the same name
// gets rules of its own.
func TestAlertRulesSkippedWhileUnchangedStillFollowEveryChange(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	q := newDLQ(ns, "skip", ns+".skip")
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	rules := func() *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: render.DeadLetterQueueAlertsName(q)}}
	}
	cm := rules()
	g.Eventually(getter(cm), wait, poll).Should(ownedBy(q, "DeadLetterQueue"))
	key := render.RuleFileKey(ns, q.Name, "deadletterqueue")
	steady := func() {
		t.Helper()
		// Resyncs that find the rules in place write nothing (and, after the first, render nothing).
		rv := cm.ResourceVersion
		g.Consistently(func() (string, error) { got, err := getter(rules())(); return got.ResourceVersion, err }, oneResync, poll).Should(Equal(rv))
	}
	steady()

	// A spec change.
	update(t, q, func(q *retryv1alpha1.DeadLetterQueue) {
		q.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](777)}
	})
	g.Eventually(func() (string, error) { _, err := getter(cm)(); return cm.Data[key], err }, wait, poll).Should(ContainSubstring("> 777"))
	steady()

	// Deleted out of band.
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed())
	g.Eventually(func() (string, error) { cm = rules(); _, err := getter(cm)(); return cm.Data[key], err }, wait, poll).Should(ContainSubstring("> 777"))
	g.Expect(cm).To(ownedBy(q, "DeadLetterQueue"))
	steady()

	// Taken over by someone else (its controller reference removed: deleting it and creating theirs
	// would race the operator making its own again): a conflict, at every resync, until it goes.
	theirs := cm.DeepCopy()
	theirs.OwnerReferences = nil
	theirs.Data = map[string]string{key: "groups: []\n"}
	g.Expect(env.Client.Update(ctx, theirs)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(notReady(retryv1alpha1.ReasonChildConflict))
	g.Consistently(dlqReady(q), oneResync, poll).Should(notReady(retryv1alpha1.ReasonChildConflict))
	g.Expect(getter(theirs)()).To(HaveField("Data", HaveKeyWithValue(key, "groups: []\n")), "never adopted nor overwritten")
	g.Expect(env.Client.Delete(ctx, theirs)).To(Succeed())
	g.Eventually(func() (string, error) { cm = rules(); _, err := getter(cm)(); return cm.Data[key], err }, wait, poll).Should(ContainSubstring("> 777"))
	g.Expect(cm).To(ownedBy(q, "DeadLetterQueue"))
	steady()

	// Deleted and made again under the same name (without a spec change): its own rules.
	g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
	g.Eventually(gone(q), wait, poll).Should(BeTrue())
	g.Expect(env.Client.Delete(ctx, cm)).To(Succeed(), "what the garbage collector (not in this suite) would do")
	again := newDLQ(ns, "skip", ns+".skip")
	again.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](777)}
	g.Expect(env.Client.Create(ctx, again)).To(Succeed())
	g.Eventually(func() (client.Object, error) { cm = rules(); return getter(cm)() }, wait, poll).Should(ownedBy(again, "DeadLetterQueue"))
	g.Expect(cm.Data[key]).To(ContainSubstring("> 777"))
}
