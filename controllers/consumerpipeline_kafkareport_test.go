package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/pkg/kubereport"
	"github.com/retryops/retry-operator/sdk/circuitstate"
)

// deploymentReadyOf reads the pipeline's DeploymentReady and Ready conditions (at its generation) as
// "<status> <reason>|<ready status> <ready reason>", and the DeploymentReady message into msg.
func deploymentReadyOf(p *retryv1alpha1.ConsumerPipeline, msg *string) func() (string, error) {
	return func() (string, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return "", err
		}
		c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionDeploymentReady)
		r := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionReady)
		if c == nil || r == nil || c.ObservedGeneration != p.Generation || r.ObservedGeneration != p.Generation {
			return "", nil
		}
		*msg = c.Message
		return string(c.Status) + " " + c.Reason + "|" + string(r.Status) + " " + r.Reason, nil
	}
}

// TestPipelineShowsKafkaRefusingItsConsumers: consumers of a pipeline whose policy has no circuit
// breaker report, with their ServiceAccount's token through circuitstate.Reporter (the dispatcher's
// code), that Kafka refuses them: DeploymentReady and Ready are False with KafkaAuthenticationFailed
// (the pods, since when, the broker's error), authentication outranks another pod's authorization
// problem, KafkaUnauthorized once only that one is left, and the Deployment's own state once none
// is. CircuitClosed keeps its meaning throughout.
func TestPipelineShowsKafkaRefusingItsConsumers(t *testing.T) {
	g := NewWithT(t)
	p, _, _ := pipelineWith(t, nil, func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Replicas = ptr.To[int32](2) })
	ns := p.Namespace
	var msg string
	g.Eventually(circuitOf(p), wait, poll).Should(Equal(" True NoCircuitBreaker"))

	core, err := typedcorev1.NewForConfig(serviceAccountConfig(t, ns, render.ServiceAccountName(p)))
	g.Expect(err).NotTo(HaveOccurred())
	reporter := func(pod string) *circuitstate.Reporter {
		return &circuitstate.Reporter{ConfigMaps: kubereport.ConfigMaps{Client: core.ConfigMaps(ns)}, ConfigMap: render.CircuitConfigMapName(p), Pod: pod,
			Interval: circuitReportInterval, RetryInterval: 100 * time.Millisecond}
	}
	a, b := reporter("orders-dispatcher-a"), reporter("orders-dispatcher-b")
	stopA, stopB := a.Start(), b.Start()
	defer stopA()
	defer stopB()

	since := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	const brokerErr = "SASL_AUTHENTICATION_FAILED: SASL Authentication failed.: Authentication failed: Invalid username or password"
	a.ObserveKafka(&circuitstate.KafkaProblem{Reason: circuitstate.KafkaAuthentication, Message: brokerErr, Since: since})
	b.ObserveKafka(&circuitstate.KafkaProblem{Reason: circuitstate.KafkaAuthorization, Message: "GROUP_AUTHORIZATION_FAILED: Not authorized to access group.", Since: since.Add(-time.Hour)})
	g.Eventually(deploymentReadyOf(p, &msg), wait, poll).Should(Equal("False KafkaAuthenticationFailed|False KafkaAuthenticationFailed"))
	g.Expect(msg).To(Equal("consumers cannot authenticate to Kafka (1 of 2 pods since 2026-11-26T08:00:00Z: orders-dispatcher-a): " + brokerErr))
	g.Expect(circuitOf(p)()).To(Equal(" True NoCircuitBreaker"), "CircuitClosed keeps its meaning")

	a.ObserveKafka(nil)
	g.Eventually(deploymentReadyOf(p, &msg), wait, poll).Should(Equal("False KafkaUnauthorized|False KafkaUnauthorized"))
	g.Expect(msg).To(Equal("consumers are not authorized by Kafka (1 of 2 pods since 2026-11-26T07:00:00Z: orders-dispatcher-b): GROUP_AUTHORIZATION_FAILED: Not authorized to access group."))

	b.ObserveKafka(nil)
	g.Eventually(deploymentReadyOf(p, &msg), wait, poll).Should(And(HavePrefix("False "), Not(ContainSubstring("Kafka"))),
		"DeploymentReady follows the Deployment again")
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionDeploymentReady).Reason).
		To(BeElementOf("Progressing", "Unavailable"), "no pod runs in envtest")
}
