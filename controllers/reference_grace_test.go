package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

// TestAReferenceMissingPastTheGracePeriodIsOneWarning: a pipeline naming a RetryPolicy that does
// not exist waits for it with no Warning (objects applied together arrive in any order) until the
// grace period has passed; then one Warning, not one per resync; none once the policy exists.
func TestAReferenceMissingPastTheGracePeriodIsOneWarning(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	ns := newNamespace(t)
	clk, reconciles := startClockedManager(t, ctx, ns)
	t.Cleanup(cancel)

	label := map[string]string{benchmarkLabel: ns}
	q := newDLQ(ns, "q", ns+".dlq")
	p := newPipeline(ns, "p", ns+".src", "typo", q.Name)
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	for _, o := range []client.Object{q, p} {
		o.SetLabels(label)
		g.Expect(env.Client.Create(ctx, o)).To(Succeed())
		t.Cleanup(func() { letGo(t, o) })
	}
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(notReady(retryv1alpha1.ReasonReferenceNotFound))

	warnings := missingWarnings(ns, p.Name)
	clk.Step(controllers.ReferenceGracePeriod - time.Second)
	holdsThroughReconcile(t, reconciles, p, warnings, BeEmpty(), "no Warning within the grace period")

	clk.Step(time.Second)
	g.Eventually(warnings, wait, poll).Should(ConsistOf(`RetryPolicy "typo" not found: the retry topics are left as they are until it exists (missing for 2m0s)`))
	clk.Step(time.Hour)
	holdsThroughReconcile(t, reconciles, p, warnings, HaveLen(1), "one Warning per missing episode, not per resync")

	g.Expect(env.Client.Create(ctx, withLabels(backoffPolicy(ns, "typo", 3, time.Second, time.Minute), label))).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	clk.Step(time.Hour)
	holdsThroughReconcile(t, reconciles, p, warnings, HaveLen(1), "no Warning once the reference exists")
}

// startClockedManager runs a manager of its own on a fake clock, for the objects of ns labelled
// benchmarkLabel=ns (the suite manager ignores them), and returns its clock and its reconciles.
func startClockedManager(t *testing.T, ctx context.Context, ns string) (*clocktesting.FakeClock, *reconcileLog) {
	t.Helper()
	reconciles := newReconcileLog()
	clk := clocktesting.NewFakeClock(metav1.Now().Time)
	startOwnManager(t, ctx, ns, clk, func(cl client.Client) client.Client { return reconcileLoggingClient{Client: cl, log: reconciles} })
	return clk, reconciles
}

// startOwnManager runs a manager of its own on the suite's API server and kfake, for the objects of
// ns labelled benchmarkLabel=ns (the suite manager ignores them), its cache as cmd/manager builds
// it, its client wrapped by wrap, on clock clk. It stops when ctx ends; the test's cleanup waits for
// it (register the cancel of ctx after this call, so that it runs first).
func startOwnManager(t *testing.T, ctx context.Context, ns string, clk clock.PassiveClock, wrap func(client.Client) client.Client) {
	t.Helper()
	cacheOpts := controllers.CacheOptions(nil)
	cacheOpts.DefaultLabelSelector = labels.SelectorFromSet(map[string]string{benchmarkLabel: ns})
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     envtestutil.Scheme(),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cacheOpts,
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			cl, err := client.New(cfg, opts)
			if err != nil {
				return nil, err
			}
			return wrap(cl), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		StatusRefreshInterval:   resyncInterval,
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		Clock:                   clk,
	}); err != nil {
		t.Fatal(err)
	}
	done := runManager(ctx, mgr)
	t.Cleanup(func() { <-done })
}

// runManager starts mgr until ctx ends; the channel closes once it has stopped.
func runManager(ctx context.Context, mgr ctrl.Manager) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Start(ctx)
	}()
	return done
}

// missingWarnings lists the notes of the Warning ReferenceNotFound events about the named object,
// one per occurrence (an event repeated as a series counts each time).
func missingWarnings(ns, name string) func() ([]string, error) {
	return func() ([]string, error) {
		evs, err := eventsFor(ns, name)()
		var notes []string
		for _, e := range evs {
			if e.Type != corev1.EventTypeWarning || e.Reason != retryv1alpha1.ReasonReferenceNotFound {
				continue
			}
			n := 1
			if e.Series != nil {
				n = int(e.Series.Count)
			}
			for range n {
				notes = append(notes, e.Note)
			}
		}
		return notes, err
	}
}

func withLabels[O client.Object](o O, l map[string]string) O {
	o.SetLabels(l)
	return o
}
