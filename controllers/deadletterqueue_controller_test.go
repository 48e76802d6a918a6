package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// oneResync is how long a drift may take to be corrected: the next resync comes within
// resyncInterval, plus time for the reconcile itself on a loaded machine.
const oneResync = resyncInterval + 3*time.Second

// testKafka is an admin client tests use to change Kafka out of band and to check what the operator
// did.
type testKafka struct {
	*kadm.Client
	cl *kgo.Client
}

// newKadm returns an admin client on the given brokers (the suite broker by default), closed at test
// end.
func newKadm(t *testing.T, addrs ...string) *testKafka {
	t.Helper()
	if len(addrs) == 0 {
		addrs = broker.ListenAddrs()
	}
	return kafkaClient(t, kgo.SeedBrokers(addrs...))
}

func kafkaClient(t *testing.T, opts ...kgo.Opt) *testKafka {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &testKafka{Client: kadm.NewClient(cl), cl: cl}
}

// topicState is what a test checks of a topic.
type topicState struct {
	Exists     bool
	Partitions int
	Configs    map[string]string
}

// describe reads a topic's partitions and its topic-level configs. It asks the broker every time
// (kadm's metadata calls may answer from the client's cache).
func describe(adm *testKafka, topic string) func() (topicState, error) {
	return func() (topicState, error) {
		ctx := context.Background()
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, adm.cl)
		if err != nil {
			return topicState{}, err
		}
		if len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
			return topicState{}, nil
		}
		st := topicState{Exists: true, Partitions: len(resp.Topics[0].Partitions), Configs: map[string]string{}}
		// Raw, with IncludeDocumentation: the mark that keeps it out of the describes counted as reconciles.
		dreq := kmsg.NewPtrDescribeConfigsRequest()
		dreq.IncludeDocumentation = true
		rr := kmsg.NewDescribeConfigsRequestResource()
		rr.ResourceType, rr.ResourceName = kmsg.ConfigResourceTypeTopic, topic
		dreq.Resources = append(dreq.Resources, rr)
		dresp, err := dreq.RequestWith(ctx, adm.cl)
		if err != nil {
			return topicState{}, err
		}
		for _, r := range dresp.Resources {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				return topicState{}, err
			}
			for _, c := range r.Configs {
				if c.Source == kmsg.ConfigSourceDynamicTopicConfig {
					st.Configs[c.Name] = ptr.Deref(c.Value, "")
				}
			}
		}
		return st, nil
	}
}

// held counts the records a topic holds (end minus start offsets).
func held(adm *testKafka, topic string) func() (int64, error) {
	return func() (int64, error) {
		ctx := context.Background()
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			return 0, err
		}
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0, err
		}
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if s, ok := starts.Lookup(o.Topic, o.Partition); ok {
				n += o.Offset - s.Offset
			}
		})
		return n, nil
	}
}

// produce writes counts[p] records to each partition p of topic.
func produce(t *testing.T, addrs []string, topic string, counts map[int32]int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for p, n := range counts {
		for i := range n {
			rs = append(rs, &kgo.Record{Topic: topic, Partition: p, Value: []byte(fmt.Sprint(i))})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// newDLQ returns a DeadLetterQueue on the suite broker with 3 partitions.
func newDLQ(ns, name, topic string) *v1.DeadLetterQueue {
	return &v1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1.DeadLetterQueueSpec{Topic: v1.DeadLetterTopic{Name: v1.TopicName(topic), Partitions: 3}},
	}
}

// dlqReady returns the queue's Ready condition for its current generation.
func dlqReady(q *v1.DeadLetterQueue) func() (*metav1.Condition, error) {
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
	q.Spec.Retention = &v1.DeadLetterRetention{MaxAge: &metav1.Duration{Duration: 168 * time.Hour}}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())

	g.Eventually(dlqReady(q), wait, poll).Should(And(isReady(), HaveField("Reason", v1.ReasonTopicReady)))
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
	q.Spec.Retention = &v1.DeadLetterRetention{MaxAge: &metav1.Duration{Duration: time.Hour}}
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
	g.Eventually(dlqReady(q), oneResync, poll).Should(And(notReady(v1.ReasonPartitionShrinkRefused),
		HaveField("Message", And(ContainSubstring("has 5 partitions"), ContainSubstring("asks for 3"), ContainSubstring("spec.topic.partitions to 5")))))
	g.Expect(q.Status.Partitions).To(Equal(int32(5)))
	g.Expect(describe(adm, topic)()).To(HaveField("Partitions", 5))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", v1.ReasonPartitionShrinkRefused))))

	// Raising the spec to match accepts them.
	update(t, q, func(q *v1.DeadLetterQueue) { q.Spec.Topic.Partitions = 5 })
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
	second.Spec.DeletionPolicy = v1.DeletionPolicyDelete
	g.Expect(env.Client.Create(ctx, second)).To(Succeed())
	g.Eventually(dlqReady(second), wait, poll).Should(And(notReady(v1.ReasonTopicConflict),
		HaveField("Message", ContainSubstring("DeadLetterQueue "+ns+"/a-first"))))
	g.Eventually(eventsFor(other, second.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", v1.ReasonTopicConflict))))

	// The loser never touches the topic, not even over several resyncs, and its deletion leaves it.
	// The loser does not describe the topic: the owner's reconciles, on the same interval, pace the check.
	holdsThroughResync(t, topic, describe(adm, topic), Equal(
		topicState{Exists: true, Partitions: 3, Configs: map[string]string{"compression.type": "zstd"}}))
	g.Expect(dlqReady(first)()).To(isReady())
	g.Expect(env.Client.Delete(ctx, second)).To(Succeed())
	g.Eventually(gone(second), wait, poll).Should(BeTrue())
	g.Expect(describe(adm, topic)()).To(HaveField("Exists", true))

	// When the owner goes (Retain), a newer claimant takes the topic over only by adopting it: the
	// operator created it for another queue.
	third := newDLQ(other, "c-third", topic)
	third.Spec.Topic.Config = map[string]string{"compression.type": "lz4"}
	third.Spec.Topic.ExistingTopic = v1.ExistingTopicAdopt
	g.Expect(env.Client.Create(ctx, third)).To(Succeed())
	g.Eventually(dlqReady(third), wait, poll).Should(notReady(v1.ReasonTopicConflict))
	g.Expect(env.Client.Delete(ctx, first)).To(Succeed())
	g.Eventually(gone(first), wait, poll).Should(BeTrue())
	g.Eventually(dlqReady(third), wait, poll).Should(isReady())
	g.Eventually(describe(adm, topic), oneResync, poll).Should(HaveField("Configs", HaveKeyWithValue("compression.type", "lz4")))
}

func TestDeadLetterQueueDeletionPolicy(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)

	for _, policy := range []v1.DeletionPolicy{v1.DeletionPolicyDelete, v1.DeletionPolicyRetain} {
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
			if policy == v1.DeletionPolicyDelete {
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
	down, err := kfake.NewCluster(kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	addrs := down.ListenAddrs()

	q := newDLQ(ns, "doomed", "doomed")
	q.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: addrs}
	q.Spec.DeletionPolicy = v1.DeletionPolicyDelete
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
	q.Spec.Retention = &v1.DeadLetterRetention{MaxMessages: ptr.To[int64](10)}
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
	closed, err := kfake.NewCluster(kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	addr := closed.ListenAddrs()[0]
	closed.Close()

	q := newDLQ(ns, "nowhere", "nowhere")
	q.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: []string{addr}}
	g.Expect(env.Client.Create(context.Background(), q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(v1.ReasonKafkaUnavailable), HaveField("Message", ContainSubstring(addr))))
	g.Eventually(eventsFor(ns, q.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", v1.ReasonKafkaUnavailable))))

	// Deleting it does not wait for a broker that will never answer longer than the bound.
	g.Expect(env.Client.Delete(context.Background(), q)).To(Succeed())
	g.Eventually(gone(q), deletionTimeout+3*time.Second, poll).Should(BeTrue())
}

// listOffsetsCounter counts the ListOffsets requests a cluster receives and the topics each names.
type listOffsetsCounter struct {
	mu       sync.Mutex
	requests []int // number of topics in each request
	at       []time.Time
}

func countListOffsets(c *kfake.Cluster) *listOffsetsCounter {
	lc := &listOffsetsCounter{}
	c.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		lc.mu.Lock()
		defer lc.mu.Unlock()
		lc.requests = append(lc.requests, len(req.(*kmsg.ListOffsetsRequest).Topics))
		lc.at = append(lc.at, time.Now())
		return nil, nil, false
	})
	return lc
}

func (lc *listOffsetsCounter) reset() {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.requests, lc.at = nil, nil
}

func (lc *listOffsetsCounter) snapshot() ([]int, []time.Time) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return append([]int(nil), lc.requests...), append([]time.Time(nil), lc.at...)
}

// TestDeadLetterQueueOffsetsAreListedInOneRoundPerResync runs 20 queues on their own broker and
// counts the ListOffsets requests it receives at steady state. Each round is one request for the
// start offsets and one for the end offsets (single broker: one leader), both naming all 20 topics;
// without batching each resync would send 20 rounds of one topic each.
func TestDeadLetterQueueOffsetsAreListedInOneRoundPerResync(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := ownBroker(t, ns)
	counter := countListOffsets(c)

	const queues = 20
	// Each queue's topic and its record of decisions.
	const topics = 2 * queues
	const refresh = time.Second
	var all []*v1.DeadLetterQueue
	for i := range queues {
		q := newDLQ(ns, fmt.Sprintf("q%02d", i), fmt.Sprintf("batch.%02d", i))
		q.Spec.Kafka = &v1.KafkaConnection{BootstrapServers: c.ListenAddrs()}
		q.Spec.StatusRefreshInterval = &metav1.Duration{Duration: refresh}
		g.Expect(env.Client.Create(ctx, q)).To(Succeed())
		all = append(all, q)
	}
	for _, q := range all {
		g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	}
	// Steady state: every queue has resynced at least once with all topics known.
	g.Eventually(func() bool {
		reqs, _ := counter.snapshot()
		return len(reqs) > 0 && reqs[len(reqs)-1] == topics
	}, wait, poll).Should(BeTrue())

	counter.reset()
	start := time.Now()
	const rounds = 4
	g.Eventually(func() int { reqs, _ := counter.snapshot(); return len(reqs) }, wait, poll).Should(BeNumerically(">=", 2*rounds))
	elapsed := time.Since(start)
	reqs, at := counter.snapshot()
	t.Logf("%d ListOffsets requests in %v for %d queues refreshed every %v; topics per request: %v",
		len(reqs), elapsed.Round(time.Millisecond), queues, refresh, reqs)

	g.Expect(reqs).To(HaveEach(topics), "every request lists the offsets of all the queues' topics")
	// Requests come in pairs (start, end) sent together; pairs are at least about an interval apart.
	// The snapshot may have caught a round between its two requests: that last one is left out.
	at = at[:len(at)&^1]
	var roundStarts []time.Time
	for i := 0; i+1 < len(at); i += 2 {
		g.Expect(at[i+1].Sub(at[i])).To(BeNumerically("<", refresh/2), "start and end offsets are one round")
		roundStarts = append(roundStarts, at[i])
	}
	for i := 1; i < len(roundStarts); i++ {
		g.Expect(roundStarts[i].Sub(roundStarts[i-1])).To(BeNumerically(">=", refresh*9/10), "at most one round per refresh interval")
	}
}

// TestKafkaSASLCredentialsFromASecret runs a queue against a broker that requires SCRAM and enforces
// ACLs, with its credentials in a Secret: a missing Secret and a wrong password become conditions,
// fixing the Secret recovers without restarting the manager, and the password never shows in status,
// events or the manager's logs.
func TestKafkaSASLCredentialsFromASecret(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	const (
		user          = "dlq-operator"
		password      = "Sup3r-s3cret-scram-pa55"
		wrongPassword = "Wr0ng-pa55-for-dlq-operator"
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.EnableSASL(),
		kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-512", "admin", "admin-secret"),
		kfake.User("SCRAM-SHA-512", user, password, kfake.ACL{
			Resource: kmsg.ACLResourceTypeTopic, Name: "secure.", Pattern: kmsg.ACLResourcePatternTypePrefixed,
			Operation: kmsg.ACLOperationAll, Allow: true,
		}),
	)
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(c.Close)

	q := newDLQ(ns, "secure", "secure.dlq")
	q.Spec.Kafka = &v1.KafkaConnection{
		BootstrapServers: c.ListenAddrs(),
		SASL:             &v1.KafkaSASL{Mechanism: v1.SASLScramSHA512, SecretRef: v1.SecretReference{Name: "kafka-user"}},
	}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(v1.ReasonReferenceNotFound), HaveField("Message", ContainSubstring(`Secret "kafka-user" not found`))))

	// The Secret appears with a wrong password: the broker's refusal becomes the condition.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kafka-user"},
		StringData: map[string]string{"username": user, "password": wrongPassword}}
	g.Expect(env.Client.Create(ctx, sec)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(v1.ReasonKafkaUnauthorized),
		HaveField("Message", And(ContainSubstring("SASL_AUTHENTICATION_FAILED"), ContainSubstring(user)))))

	// Fixing the Secret recovers without a restart.
	update(t, sec, func(s *corev1.Secret) { s.StringData = map[string]string{"password": password} })
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	g.Expect(describe(kafkaClient(t, kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(scramAdmin())), "secure.dlq")()).To(HaveField("Partitions", 3))

	// The ACLs apply: a topic outside the user's prefix is refused, and says so.
	outside := newDLQ(ns, "outside", "private.dlq")
	outside.Spec.Kafka = q.Spec.Kafka
	g.Expect(env.Client.Create(ctx, outside)).To(Succeed())
	g.Eventually(dlqReady(outside), wait, poll).Should(And(notReady(v1.ReasonKafkaUnauthorized), HaveField("Message", ContainSubstring("TOPIC_AUTHORIZATION_FAILED"))))

	// Neither password shows anywhere.
	for _, obj := range []*v1.DeadLetterQueue{q, outside} {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		st, err := json.Marshal(obj.Status)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(st)).NotTo(Or(ContainSubstring(password), ContainSubstring(wrongPassword)))
	}
	events, err := eventsFor(ns, q.Name)()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(events).NotTo(BeEmpty())
	allEvents, err := json.Marshal(events)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(allEvents)).To(ContainSubstring("SASL_AUTHENTICATION_FAILED"))
	g.Expect(string(allEvents)).NotTo(Or(ContainSubstring(password), ContainSubstring(wrongPassword)))
	logs := managerLogs.String()
	g.Expect(logs).To(ContainSubstring("SASL_AUTHENTICATION_FAILED"), "the logs were captured")
	g.Expect(logs).NotTo(Or(ContainSubstring(password), ContainSubstring(wrongPassword)))
	g.Expect(meta.FindStatusCondition(q.Status.Conditions, v1.ConditionReady).Message).NotTo(ContainSubstring(password))
}

// scramAdmin is the superuser of the SASL test broker.
func scramAdmin() sasl.Mechanism {
	return scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()
}
