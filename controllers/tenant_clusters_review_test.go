package controllers_test

import (
	"context"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

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
