package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

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
	var all []*retryv1alpha1.DeadLetterQueue
	for i := range queues {
		q := newDLQ(ns, fmt.Sprintf("q%02d", i), fmt.Sprintf("batch.%02d", i))
		q.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: c.ListenAddrs()}
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
	const wantRounds = 5
	g.Eventually(func() int { reqs, _ := counter.snapshot(); return len(reqs) }, wait, poll).Should(BeNumerically(">=", 2*wantRounds))
	elapsed := time.Since(start)
	reqs, at := counter.snapshot()
	t.Logf("%d ListOffsets requests in %v for %d queues refreshed every %v; topics per request: %v",
		len(reqs), elapsed.Round(time.Millisecond), queues, refresh, reqs)

	g.Expect(reqs).To(HaveEach(topics), "every request lists the offsets of all the queues' topics")
	// A round's start and end requests are sent at once; a round is not started before the last one's
	// snapshot is an interval old. So requests fall into clusters more than half an interval apart,
	// wherever the window opened (the first and the last cluster may be a round cut in two: they are
	// left out). Each whole cluster must be exactly one round, and rounds an interval apart.
	var rounds [][]time.Time
	for i, ts := range at {
		if i == 0 || ts.Sub(at[i-1]) > refresh/2 {
			rounds = append(rounds, nil)
		}
		rounds[len(rounds)-1] = append(rounds[len(rounds)-1], ts)
	}
	g.Expect(len(rounds)).To(BeNumerically(">=", 3), "rounds seen: %v", at)
	for i, r := range rounds[1 : len(rounds)-1] {
		g.Expect(r).To(HaveLen(2), "round %d: one request for the start offsets and one for the end offsets", i+1)
	}
	for i := 2; i < len(rounds)-1; i++ {
		g.Expect(rounds[i][0].Sub(rounds[i-1][0])).To(BeNumerically(">=", refresh*9/10), "at most one round per refresh interval")
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
	c, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1),
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
	q.Spec.Kafka = &retryv1alpha1.KafkaConnection{
		BootstrapServers: c.ListenAddrs(),
		SASL:             &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "kafka-user"}},
	}
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(retryv1alpha1.ReasonReferenceNotFound), HaveField("Message", ContainSubstring(`Secret "kafka-user" not found`))))

	// The Secret appears with a wrong password: the broker's refusal becomes the condition.
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kafka-user"},
		StringData: map[string]string{"username": user, "password": wrongPassword}}
	g.Expect(env.Client.Create(ctx, sec)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(And(notReady(retryv1alpha1.ReasonKafkaUnauthorized),
		HaveField("Message", And(ContainSubstring("SASL_AUTHENTICATION_FAILED"), ContainSubstring(user)))))

	// Fixing the Secret recovers without a restart.
	update(t, sec, func(s *corev1.Secret) { s.StringData = map[string]string{"password": password} })
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	g.Expect(describe(kafkaClient(t, kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(scramAdmin())), "secure.dlq")()).To(HaveField("Partitions", 3))

	// The ACLs apply: a topic outside the user's prefix is refused, and says so.
	outside := newDLQ(ns, "outside", "private.dlq")
	outside.Spec.Kafka = q.Spec.Kafka
	g.Expect(env.Client.Create(ctx, outside)).To(Succeed())
	g.Eventually(dlqReady(outside), wait, poll).Should(And(notReady(retryv1alpha1.ReasonKafkaUnauthorized), HaveField("Message", ContainSubstring("TOPIC_AUTHORIZATION_FAILED"))))

	// Neither password shows anywhere.
	for _, obj := range []*retryv1alpha1.DeadLetterQueue{q, outside} {
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
	g.Expect(meta.FindStatusCondition(q.Status.Conditions, retryv1alpha1.ConditionReady).Message).NotTo(ContainSubstring(password))
}

// scramAdmin is the superuser of the SASL test broker.
func scramAdmin() sasl.Mechanism {
	return scram.Auth{User: "admin", Pass: "admin-secret"}.AsSha512Mechanism()
}
