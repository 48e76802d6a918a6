package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

// TestPipelineReconcilesCompileThePolicyOncePerGeneration: a pipeline reconciled many times
// compiles its RetryPolicy once (reading the tiers, rendering the ConfigMap, the Deployment and
// the alert rules all share the compiled policy), and once more after the policy's spec changes
// (patterns were recompiled on every reconcile in several places).
func TestPipelineReconcilesCompileThePolicyOncePerGeneration(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	g.Expect(err).NotTo(HaveOccurred())
	_, r, err := controllers.NewReconcilers(mgr, env.Client, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
	})
	g.Expect(err).NotTo(HaveOccurred())
	// The suite manager ignores objects with the benchmark label: only this test reconciles them.
	label := map[string]string{benchmarkLabel: "true"}
	rp := backoffPolicy(ns, "p", 3, time.Second, time.Minute)
	rp.Labels = label
	q := newDLQ(ns, "once", ns+".once")
	q.Labels = label
	p := newPipeline(ns, "once", ns+".once-source", "p", q.Name)
	p.Labels = label
	for _, o := range []client.Object{rp, q, p} {
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}
	reconcile := func(n int) {
		for range n {
			_, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
	}
	reconcile(10)
	g.Expect(r.PolicyCompilations()).To(BeEquivalentTo(1), "compilations over 10 reconciles of one policy generation")

	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(rp), rp)).To(Succeed())
	rp.Spec.MaxAttempts = 4
	g.Expect(env.Client.Update(ctx, rp)).To(Succeed())
	reconcile(10)
	g.Expect(r.PolicyCompilations()).To(BeEquivalentTo(2), "compilations after the policy's second generation")
}
