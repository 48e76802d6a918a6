package controllers

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/internal/render"
)

// A pipeline on its own cluster whose DeadLetterQueue is on the secured default connection: its pods
// write dead letters there, so they need the namespace's identity as much as a pipeline on it; the
// message says that the queue's connection is the one that needs it (the pipeline's own spec.kafka
// already names servers, so "set spec.kafka" alone would send the user to the wrong object). A
// pipeline and queue both on their own clusters read no Secret and need none.
func TestReconcileIdentityForAQueueOnTheDefaultConnection(t *testing.T) {
	defaults := kafkaspec.Defaults{BootstrapServers: []string{"kafka:9093"}, TLS: &kafka.TLSConfig{CAPEM: []byte("ca"), ServerName: "kafka.internal"},
		SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "op", Password: "op-pass"}, ConsumerSecret: "{namespace}-consumer"}
	own := &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}}
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders"}, Spec: retryv1alpha1.ConsumerPipelineSpec{Kafka: own}}
	queue := func(queueKafka *retryv1alpha1.KafkaConnection) *retryv1alpha1.DeadLetterQueue {
		return &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "dlq"}, Spec: retryv1alpha1.DeadLetterQueueSpec{Kafka: queueKafka}}
	}
	reconciler := func(objs ...*corev1.Secret) *ConsumerPipelineReconciler {
		b := fake.NewClientBuilder().WithScheme(envtestutil.Scheme())
		for _, o := range objs {
			b = b.WithObjects(o)
		}
		r := &ConsumerPipelineReconciler{}
		r.Client, r.Kafka = b.Build(), &kafkaAccess{Defaults: defaults}
		return r
	}

	g := NewWithT(t)
	var ps problems
	_, missing, err := reconciler().reconcileIdentity(context.Background(), p, queue(nil), nil, &ps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(missing).To(BeTrue(), "no config for pods that could not write their dead letters")
	g.Expect(ps).To(HaveLen(1))
	pr := ps[0]
	g.Expect(pr.Reason).To(Equal(retryv1alpha1.ReasonKafkaCredentialsMissing))
	g.Expect(pr.Message).To(And(HavePrefix(`DeadLetterQueue "dlq" is on the default Kafka connection: `),
		ContainSubstring(`create Secret "team-consumer" in namespace "team"`), HaveSuffix("or set the DeadLetterQueue's spec.kafka")))
	g.Expect(pr.Message).NotTo(ContainSubstring("op-pass"))

	ps = nil
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "team-consumer"}, Data: map[string][]byte{"password": []byte("p")}}
	dc, missing, err := reconciler(secret).reconcileIdentity(context.Background(), p, queue(nil), nil, &ps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(missing).To(BeFalse())
	g.Expect(dc).To(Equal(&render.DefaultConnection{TLS: true, CAPEM: []byte("ca"), ServerName: "kafka.internal", SASLMechanism: retryv1alpha1.SASLScramSHA512,
		Identity: &render.ConsumerIdentity{Secret: "team-consumer", Username: "team-consumer", PasswordKey: "password"}}))

	ps = nil
	dc, missing, err = reconciler().reconcileIdentity(context.Background(), p, queue(own), nil, &ps)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(missing).To(BeFalse())
	g.Expect(dc).To(BeNil())
	g.Expect(ps).To(BeEmpty(), "neither connection is the default one")
}
