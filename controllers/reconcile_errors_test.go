package controllers_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

// TestAFailedListStillLeavesAConditionSayingSo calls Reconcile directly, on a client whose List of
// the claims on a topic fails (the API server refused it, say): the error is returned, for the work
// queue's backoff, and Ready says so all the same (False, ReconcileError, with the error) instead of
// the status going unwritten.
func TestAFailedListStillLeavesAConditionSayingSo(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	refused := errors.New("the API server refused the list")
	// A manager for the scheme, the REST mapper and the event recorders; it does not run.
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	opts := controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		StatusRefreshInterval:   resyncInterval,
	}
	// The suite manager ignores objects with the benchmark label: only this test reconciles them.
	label := map[string]string{benchmarkLabel: "true"}
	q := newDLQ(ns, "claims-unlisted", ns+".claims-unlisted")
	q.Labels = label
	// The pipeline's references exist, so that the failed step is its only problem.
	rp := backoffPolicy(ns, "p", 3, time.Second, time.Minute)
	rp.Labels = label
	if err := env.Client.Create(ctx, rp); err != nil {
		t.Fatal(err)
	}
	p := newPipeline(ns, "claims-unlisted", ns+".claims-unlisted-source", "p", q.Name)
	p.Labels = label
	for _, o := range []client.Object{q, p} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { letGo(t, o) })
	}
	// The queue's topic is recorded as the queue's, so that the pipeline's dead letter topic is one
	// the queue manages.
	ledger := &kafkaspec.Ledger{Reader: env.Client, Writer: env.Client, Namespace: envtestutil.OperatorNamespace}
	if err := ledger.Record(ctx, q, string(q.Spec.Topic.Name)); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		obj        client.Object
		failing    client.ObjectList
		pick       func(*controllers.DeadLetterQueueReconciler, *controllers.ConsumerPipelineReconciler) reconcile.Reconciler
		conditions func() []metav1.Condition
	}{
		"a DeadLetterQueue whose topic's claims cannot be listed": {
			obj: q, failing: &retryv1alpha1.DeadLetterQueueList{},
			pick: func(q *controllers.DeadLetterQueueReconciler, _ *controllers.ConsumerPipelineReconciler) reconcile.Reconciler {
				return q
			},
			conditions: func() []metav1.Condition { return q.Status.Conditions },
		},
		"a ConsumerPipeline whose source's claims cannot be listed": {
			obj: p, failing: &retryv1alpha1.ConsumerPipelineList{},
			pick: func(_ *controllers.DeadLetterQueueReconciler, p *controllers.ConsumerPipelineReconciler) reconcile.Reconciler {
				return p
			},
			conditions: func() []metav1.Condition { return p.Status.Conditions },
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			direct, err := client.NewWithWatch(env.Config, client.Options{Scheme: envtestutil.Scheme()})
			g.Expect(err).NotTo(HaveOccurred())
			c := interceptor.NewClient(direct, interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if reflect.TypeOf(list) == reflect.TypeOf(tc.failing) {
						return refused
					}
					return c.List(ctx, list, opts...)
				},
			})
			q, p, err := controllers.NewReconcilers(mgr, c, opts)
			g.Expect(err).NotTo(HaveOccurred())

			_, err = tc.pick(q, p).Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(tc.obj)})
			g.Expect(err).To(MatchError(refused), "the error is returned for the work queue's backoff")

			g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(tc.obj), tc.obj)).To(Succeed())
			ready := meta.FindStatusCondition(tc.conditions(), retryv1alpha1.ConditionReady)
			g.Expect(ready).To(notReady("ReconcileError"))
			g.Expect(ready.Message).To(ContainSubstring(refused.Error()))
			g.Expect(ready.ObservedGeneration).To(Equal(tc.obj.GetGeneration()))
		})
	}
}

// letGo removes obj's finalizers and deletes it: no controller reconciles it.
func letGo(t *testing.T, obj client.Object) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		return
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	obj.SetFinalizers(nil)
	if err := env.Client.Patch(ctx, obj, patch); err != nil {
		t.Errorf("removing the finalizers of %s: %v", obj.GetName(), err)
	}
	if err := client.IgnoreNotFound(env.Client.Delete(ctx, obj)); err != nil {
		t.Errorf("deleting %s: %v", obj.GetName(), err)
	}
}
