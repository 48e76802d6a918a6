package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/sdk/headers"
)

// A Replay whose target.topic the manager's claim policy (--topic-prefix) does not give the
// action's namespace can never run (its spec is immutable): it fails at once, like a refused
// target (phase Failed, reason TopicClaimRefused naming the rule, a Warning event), and nothing is
// written to that topic; it is not left Pending, looked at again every two seconds for ever.
func TestAReplayOutsideTheClaimPolicyFails(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	readyQueue(t, ns)
	writeDeadLetters(t, ns+".dlq", ns+".orders", ns+"/orders", []actionDeadLetter{{reason: headers.ReasonNonRetriable, errorType: "HTTP422"}})
	elsewhere := "elsewhere-" + ns // another team's topic, outside the namespace's prefix
	createTopic(t, adm, elsewhere, 1)

	// A manager for the scheme and the event recorders; it does not run. The suite manager ignores
	// objects with the benchmark label: only this reconciler, under the claim policy, looks at it.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	g.Expect(err).NotTo(HaveOccurred())
	direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: envtestutil.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	r, err := controllers.NewActionReconciler(mgr, direct, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
		KafkaTenancy:            kafkaspec.Tenancy{TopicPrefix: "{namespace}."},
	})
	g.Expect(err).NotTo(HaveOccurred())

	a := newAction(ns, "to-elsewhere", "dlq", retryv1alpha1.DeadLetterReplay, nil)
	a.Spec.Target = &retryv1alpha1.ReplayTarget{Topic: retryv1alpha1.TopicName(elsewhere)}
	a.Labels = map[string]string{benchmarkLabel: "replay-target"}
	g.Expect(env.Client.Create(ctx, a)).To(Succeed())
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a)}
	var last ctrl.Result
	g.Eventually(func() (retryv1alpha1.DeadLetterActionPhase, error) {
		if last, err = r.Reconcile(ctx, req); err != nil {
			return "", err
		}
		return actionPhase(a)()
	}, wait, time.Second).Should(Equal(retryv1alpha1.ActionFailed), func() string {
		ready := meta.FindStatusCondition(a.Status.Conditions, retryv1alpha1.ConditionReady)
		return fmt.Sprintf("replay into %s under --topic-prefix {namespace}.: phase %q, Ready %+v, requeued after %v", elsewhere, a.Status.Phase, ready, last.RequeueAfter)
	})
	g.Expect(actionReady(a)()).To(And(HaveField("Reason", retryv1alpha1.ReasonTopicClaimRefused), HaveField("Message", And(
		ContainSubstring(elsewhere), ContainSubstring("--topic-prefix"), ContainSubstring(`"`+ns+`."`)))))
	g.Eventually(eventsFor(ns, a.Name), wait, poll).Should(ContainElement(And(HaveField("Type", corev1.EventTypeWarning),
		HaveField("Reason", retryv1alpha1.ReasonTopicClaimRefused))))
	g.Expect(r.Reconcile(ctx, req)).To(Equal(ctrl.Result{}), "a failed action is not looked at again")
	g.Expect(held(adm, elsewhere)()).To(BeZero(), "nothing replayed into %s", elsewhere)
	g.Expect(held(adm, ns+".dlq.state")()).To(BeZero(), "no decision recorded")
	g.Expect(a.Status.Snapshot).To(BeEmpty(), "never started")
}
