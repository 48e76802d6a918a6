package controllers_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// otherSpelling is spec.kafka naming the suite broker as localhost where the default connection
// says 127.0.0.1: the same cluster, spelled another way.
func otherSpelling(t *testing.T) *retryv1alpha1.KafkaConnection {
	t.Helper()
	var servers []string
	for _, a := range broker.ListenAddrs() {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("the suite broker listens on %q, not 127.0.0.1:<port>", a)
		}
		servers = append(servers, net.JoinHostPort("localhost", port))
	}
	return &retryv1alpha1.KafkaConnection{BootstrapServers: servers}
}

// One cluster spelled two ways (127.0.0.1:port and localhost:port) is one cluster: a pipeline
// joining a consumer group an older pipeline joined through the other spelling is refused, naming
// it, and runs no consumers; so is one whose tier base is another's.
func TestOneClusterSpelledTwoWaysSharesItsGroupsAndTiers(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := sharingFixture(t)
	createTopic(t, adm, ns+".a", 1)
	createTopic(t, adm, ns+".b", 1)

	older := newPipeline(ns, "a-older", ns+".a", "p", "dlq")
	older.Spec.Source.ConsumerGroup = ns + ".shared"
	g.Expect(env.Client.Create(ctx, older)).To(Succeed())
	g.Eventually(pipelineCondition(older, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	newer := newPipeline(ns, "b-newer", ns+".b", "p", "dlq")
	newer.Spec.Source.ConsumerGroup = ns + ".shared"
	newer.Spec.Kafka = otherSpelling(t)
	g.Expect(env.Client.Create(ctx, newer)).To(Succeed())
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonConsumerGroupConflict),
		HaveField("Message", ContainSubstring("ConsumerPipeline "+ns+"/a-older"))))
	g.Expect(consumers(newer)).To(BeNil(), "no consumers")
	holdsThroughResync(t, older, pipelineCondition(older, retryv1alpha1.ConditionTopicsReady), isReady())

	// Tiers: a name crafted as the shortened tier base of a long one (TierBase).
	long := strings.Repeat("n", 253-len(ns))
	base := dispatchercfg.TierBase("", ns, long)
	crafted := strings.TrimPrefix(base, ns+".")
	holder := newPipeline(ns, long, ns+".a", "p", "dlq")
	holder.Spec.Source.ConsumerGroup = ns + ".holder"
	g.Expect(env.Client.Create(ctx, holder)).To(Succeed())
	g.Eventually(ledgerOf(holder), wait, poll).Should(ContainElement(base + ".retry.1"))
	twin := newPipeline(ns, crafted, ns+".a", "p", "dlq")
	twin.Spec.Source.ConsumerGroup = ns + ".twin"
	twin.Spec.Kafka = otherSpelling(t)
	g.Expect(env.Client.Create(ctx, twin)).To(Succeed())
	g.Eventually(pipelineCondition(twin, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", ContainSubstring(base+".retry.*"))))
	g.Expect(consumers(twin)).To(BeNil(), "no consumers")
}

// Two queues claiming one topic of one cluster spelled two ways: the newer, though it asks to adopt
// an existing topic, is refused, naming the older, and leaves the topic alone.
func TestOneClusterSpelledTwoWaysSharesItsQueueTopics(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	topic := ns + ".letters"
	older := newDLQ(ns, "a-older", topic)
	g.Expect(env.Client.Create(ctx, older)).To(Succeed())
	g.Eventually(dlqReady(older), wait, poll).Should(isReady())

	newer := newDLQ(ns, "b-newer", topic)
	newer.Spec.Kafka = otherSpelling(t)
	newer.Spec.Topic.Partitions = 5
	newer.Spec.Topic.ExistingTopic = retryv1alpha1.ExistingTopicAdopt
	g.Expect(env.Client.Create(ctx, newer)).To(Succeed())
	g.Eventually(dlqReady(newer), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", ContainSubstring("DeadLetterQueue "+ns+"/a-older"))))
	g.Expect(describe(newKadm(t), topic)()).To(HaveField("Partitions", 3), "the older queue's topic, left alone")
	holdsThroughResync(t, older, dlqReady(older), isReady())
}

// An older pipeline whose cluster was never identified (its brokers never answered the manager)
// keeps its group in its own namespace: its pods may reach brokers the manager cannot, so the newer
// one on an identified cluster waits, saying whom for. (Another namespace's such claimant holds
// nothing: TestATenantsUnreachableClusterSquatsNoOtherTenantsGroup.)
func TestAClaimantWhoseClusterWasNeverIdentifiedKeepsItsGroupInItsNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, adm := sharingFixture(t)
	createTopic(t, adm, ns+".a", 1)
	createTopic(t, adm, ns+".b", 1)
	createTopic(t, adm, ns+".c", 1)
	// Ports nothing listens on: the connections are refused.
	darkAddr := func() string {
		dark, err := net.Listen("tcp", "127.0.0.1:0")
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { g.Expect(dark.Close()).To(Succeed()) }()
		return dark.Addr().String()
	}
	secondAfter := func(p *retryv1alpha1.ConsumerPipeline) {
		g.Eventually(func() bool { return metav1.Now().Unix() > p.CreationTimestamp.Unix() }, wait, poll).Should(BeTrue())
	}

	older := newPipeline(ns, "a-older", ns+".a", "p", "dlq")
	older.Spec.Source.ConsumerGroup = ns + ".shared"
	older.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{darkAddr()}}
	g.Expect(env.Client.Create(ctx, older)).To(Succeed())
	g.Eventually(pipelineCondition(older, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(Not(BeNil()), HaveField("Status", BeEquivalentTo("False"))))
	g.Expect(older.Status.KafkaClusterID).To(BeEmpty(), "never identified")
	secondAfter(older)

	newer := newPipeline(ns, "b-newer", ns+".b", "p", "dlq")
	newer.Spec.Source.ConsumerGroup = ns + ".shared"
	g.Expect(env.Client.Create(ctx, newer)).To(Succeed())
	g.Eventually(pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonConsumerGroupConflict),
		HaveField("Message", And(ContainSubstring("ConsumerPipeline "+ns+"/a-older"), ContainSubstring("never identified")))))
	g.Expect(consumers(newer)).To(BeNil(), "no consumers")
	holdsThroughResync(t, newer, pipelineCondition(newer, retryv1alpha1.ConditionTopicsReady), notReady(retryv1alpha1.ReasonConsumerGroupConflict))
}

// Tenants with a cluster of their own each, no claim policy (what docs/operator.md recommends for
// them): a tenant's pipeline on a cluster that cannot be told (a port nothing listens on), joining
// the group another namespace's pipeline will have by default, keeps no name from that namespace's
// pipeline on its own cluster, created later.
func TestATenantsUnreachableClusterSquatsNoOtherTenantsGroup(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	tenant, victim := newNamespace(t), newNamespace(t)
	startTenancyManager(t, ctx, tenant, kafkaspec.Tenancy{RequireResourceCredentials: true})
	t.Cleanup(cancel)
	adm := newKadm(t)
	createTopic(t, adm, victim+".orders", 1)
	create := func(o client.Object) {
		t.Helper()
		o.SetLabels(map[string]string{benchmarkLabel: tenant})
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}
	dark, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	addr := dark.Addr().String()
	g.Expect(dark.Close()).To(Succeed())
	own := &retryv1alpha1.KafkaConnection{BootstrapServers: broker.ListenAddrs()}

	squatQueue := newDLQ(tenant, "own", tenant+".dlq")
	squatQueue.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{addr}}
	create(squatQueue)
	create(backoffPolicy(tenant, "p", 2, time.Second, time.Minute))
	squatter := newPipeline(tenant, "squatter", "orders", "p", "own")
	squatter.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: []string{addr}}
	squatter.Spec.Source.ConsumerGroup = victim + ".billing"
	create(squatter)
	g.Eventually(func() bool { return metav1.Now().Unix() > squatter.CreationTimestamp.Unix() }, wait, poll).Should(BeTrue())

	queue := newDLQ(victim, "dlq", victim+".dlq")
	queue.Spec.Kafka = own
	create(queue)
	create(backoffPolicy(victim, "p", 2, time.Second, time.Minute))
	billing := newPipeline(victim, "billing", victim+".orders", "p", "dlq")
	billing.Spec.Kafka = own
	create(billing)
	g.Eventually(dlqReady(queue), wait, poll).Should(isReady())
	// Until its queue's first reconcile is seen, the pipeline may report TopicNotOwned; a claim the
	// squatter held would stay.
	g.Eventually(func() (string, error) {
		c, err := pipelineCondition(billing, retryv1alpha1.ConditionTopicsReady)()
		if err != nil || c == nil {
			return "", err
		}
		return string(c.Status) + " " + c.Reason + ": " + c.Message, nil
	}, wait, poll).Should(HavePrefix("True "), "its own group, on its own cluster")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(queue), queue)).To(Succeed())
	g.Expect(queue.Status.KafkaClusterID).NotTo(BeEmpty(), "a queue records its cluster too")
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(squatter), squatter)).To(Succeed())
	g.Expect(squatter.Status.KafkaClusterID).To(BeEmpty(), "never identified")
}
