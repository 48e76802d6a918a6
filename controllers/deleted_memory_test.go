package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/lease"
)

// TestWhatADeletedResourceLeftInMemoryGoesByItself: queues and pipelines are deleted, through their
// finalizer or with it removed by hand, while others live on. Nothing is forgotten on the way out;
// once the leases are over (a few refresh intervals), every in-memory store (the batched reads,
// the tallies, the counts by pipeline, the connection registry, the growth history, the state
// counts, the missing references) holds the living resources only.
func TestWhatADeletedResourceLeftInMemoryGoesByItself(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	q, p := isolatedReconcilers(t, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
		Clock:                   clk,
	})
	ns := newNamespace(t)
	adm := newKadm(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "twice", 2, time.Second, time.Second))).To(Succeed())
	labelled := func(o client.Object) client.Object {
		o.SetLabels(map[string]string{benchmarkLabel: "true"})
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
		return o
	}
	reconcile := func(o client.Object) {
		t.Helper()
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(o)}
		for range 3 {
			var err error
			if _, isQueue := o.(*retryv1alpha1.DeadLetterQueue); isQueue {
				_, err = q.Reconcile(ctx, req)
			} else {
				_, err = p.Reconcile(ctx, req)
			}
			g.Expect(err).NotTo(HaveOccurred())
		}
	}
	var queues, pipelines []client.Object
	for _, name := range []string{"kept", "deleted", "unhooked"} {
		createTopic(t, adm, ns+"."+name, 1)
		queues = append(queues, labelled(newDLQ(ns, name, ns+"."+name+".dlq")))
		pipelines = append(pipelines, labelled(newPipeline(ns, name, ns+"."+name, "twice", name)))
	}
	waiting := labelled(newPipeline(ns, "waiting", ns+".kept", "no-such-policy", "kept"))
	for _, o := range append(append(queues, pipelines...), waiting) {
		reconcile(o)
	}
	g.Expect(controllers.Held(q, p)).To(Equal(map[string]int{
		"offsets": 7, "topics": 7, "commits": 4, "due": 3, "tallies": 3, "byPipeline": 3,
		"connections": 7, "growth": 3, "stateCounts": 3, "templates": 0, "missing": 1,
	}), "all of them, before")

	// "deleted" goes through its finalizer; "unhooked" has its finalizer removed by hand, so no
	// reconcile lets it go; "waiting" is deleted while its policy is missing.
	for _, o := range []client.Object{pipelines[1], queues[1], waiting} {
		g.Expect(env.Client.Delete(ctx, o)).To(Succeed())
		g.Eventually(func() bool {
			reconcile(o)
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(o), o))
		}, wait, poll).Should(BeTrue(), "%s let go", o.GetName())
	}
	letGo(t, pipelines[2])
	letGo(t, queues[2])
	reconcile(pipelines[2])
	reconcile(queues[2])

	// The living resources resync every interval; the deleted ones never again.
	interval := resyncInterval
	for end := clk.Now().Add(lease.For(interval) + 2*lease.Min); clk.Now().Before(end); {
		clk.SetTime(clk.Now().Add(lease.Min / 4))
		reconcile(queues[0])
		reconcile(pipelines[0])
	}
	g.Expect(controllers.Held(q, p)).To(Equal(map[string]int{
		"offsets": 2, "topics": 2, "commits": 1, "due": 1, "tallies": 1, "byPipeline": 1,
		"connections": 2, "growth": 1, "stateCounts": 1, "templates": 0, "missing": 0,
	}), "the kept queue and pipeline only")
}
