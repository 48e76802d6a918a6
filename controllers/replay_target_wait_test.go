package controllers_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// countLedgerLists counts the lists of the topic ledger's ConfigMaps sent through it.
type countLedgerLists struct {
	next http.RoundTripper
	n    *atomic.Int64
}

func (c countLedgerLists) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/configmaps") && strings.Contains(req.URL.Query().Get("labelSelector"), kafkaspec.LedgerLabel) {
		c.n.Add(1)
	}
	return c.next.RoundTrip(req)
}

// Checking a Replay's explicit target lists the whole topic ledger, uncached: it is done once,
// when the action is about to run, not at every look of an action that waits its turn (every two
// seconds, for as long as the actions ahead of it run), which any tenant could multiply.
func TestAWaitingReplayDoesNotListTheLedger(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	readyQueue(t, ns)

	var lists atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countLedgerLists{next: rt, n: &lists} }
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	g.Expect(err).NotTo(HaveOccurred())
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: envtestutil.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	r, err := controllers.NewActionReconciler(mgr, direct, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
	})
	g.Expect(err).NotTo(HaveOccurred())

	// Only this test's reconciler looks at these actions; the first one, never run, is ahead.
	mine := map[string]string{benchmarkLabel: "replay-target"}
	ahead := newAction(ns, "a-ahead", "dlq", retryv1alpha1.DeadLetterResolve, nil)
	ahead.Spec.Note = "first"
	ahead.Labels = mine
	g.Expect(env.Client.Create(ctx, ahead)).To(Succeed())
	waiting := newAction(ns, "b-waiting", "dlq", retryv1alpha1.DeadLetterReplay, nil)
	waiting.Spec.Target = &retryv1alpha1.ReplayTarget{Topic: retryv1alpha1.TopicName(ns + ".elsewhere")}
	waiting.Labels = mine
	g.Expect(env.Client.Create(ctx, waiting)).To(Succeed())
	for range 5 {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(waiting)})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(direct.Get(ctx, client.ObjectKeyFromObject(waiting), waiting)).To(Succeed())
	g.Expect(waiting.Status.Conditions).To(ContainElement(HaveField("Reason", "WaitingForAction")))
	g.Expect(lists.Load()).To(BeZero(), "lists of the topic ledger in 5 looks at a waiting action")
}
