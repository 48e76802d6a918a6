package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// A rival whose brokers did not answer in the check of the consumer group (a tenant's pipeline on
// a dark port joining the group) spares the other rivals of that check a wait, and only those: the
// check of the topics a DeadLetterQueue claims still asks the queue's brokers, so that a queue on
// the pipeline's cluster, under other server names and not identified yet, keeps its topic from it.
func TestAnUnansweredRivalOfTheGroupLeavesTheQueueChecksAsking(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	t0 := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const tier = "victim.billing.retry.1"
	d := kafkaspec.Defaults{}
	servers := func(s string) *retryv1alpha1.KafkaConnection {
		return &retryv1alpha1.KafkaConnection{BootstrapServers: []string{s}}
	}
	victim := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Namespace: "victim", Name: "billing", UID: "victim-billing", CreationTimestamp: metav1.NewTime(t0.Add(time.Hour))},
		Spec:       retryv1alpha1.ConsumerPipelineSpec{Kafka: servers("a:9092"), Source: retryv1alpha1.PipelineSource{Topic: "orders"}},
	}
	squatter := &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "squatter", UID: "tenant-squatter", CreationTimestamp: t0},
		Spec: retryv1alpha1.ConsumerPipelineSpec{Kafka: servers("dark:9092"),
			Source: retryv1alpha1.PipelineSource{Topic: "orders", ConsumerGroup: consumerGroup(victim)}},
	}
	queue := &retryv1alpha1.DeadLetterQueue{
		ObjectMeta: metav1.ObjectMeta{Namespace: "third", Name: "grab", UID: "third-grab"},
		Spec:       retryv1alpha1.DeadLetterQueueSpec{Kafka: servers("b:9092"), Topic: retryv1alpha1.DeadLetterTopic{Name: tier}},
	}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(victim, squatter, queue).
		WithIndex(&retryv1alpha1.DeadLetterQueue{}, indexDLQByClaim, func(o client.Object) []string {
			return []string{string(o.(*retryv1alpha1.DeadLetterQueue).Spec.Topic.Name)}
		}).
		WithIndex(&retryv1alpha1.ConsumerPipeline{}, indexPipelineBySourceClaim, func(o client.Object) []string {
			return []string{string(o.(*retryv1alpha1.ConsumerPipeline).Spec.Source.Topic)}
		}).
		WithIndex(&retryv1alpha1.ConsumerPipeline{}, indexPipelineByGroupClaim, func(o client.Object) []string {
			return []string{consumerGroup(o.(*retryv1alpha1.ConsumerPipeline))}
		}).
		WithIndex(&retryv1alpha1.ConsumerPipeline{}, indexPipelineByTierClaim, func(o client.Object) []string {
			return []string{tierBase(o.(*retryv1alpha1.ConsumerPipeline), d)}
		}).Build()
	f := kafkafake.New()
	// a:9092 and b:9092 are two names of one cluster; the squatter's brokers do not answer.
	f.SetClusterID("c1", "a:9092")
	f.SetClusterID("c1", "b:9092")
	f.FailNext(kafkafake.ClusterID, errors.New("dial tcp dark:9092: connection refused"))
	r := &ConsumerPipelineReconciler{}
	r.Client = c
	r.Ledger = &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: "operator"}
	r.Kafka = &kafkaAccess{Defaults: d, Connections: kafka.NewRegistry(f, nil)}

	var ps problems
	refs := pipelineRefs{tiers: dispatchercfg.Tiers{{Name: tier}}}
	claim, err := r.claims(ctx, victim, refs, r.pipelineConnection(victim), &ps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(claim.refused).To(BeNil(), "the squatter's cluster was never identified: it holds nothing")
	g.Expect(claim.blocked).To(HaveKey(tier), "the queue is on the pipeline's cluster: its topic is left alone")
	g.Expect(ps).To(ContainElement(HaveField("Reason", retryv1alpha1.ReasonTopicConflict)))
}
