package controllers_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/sdk/testutil/syncbuf"
)

// env is the control plane shared by this package's tests; the manager runs against it for the whole
// run. Tests read through env.Client, which does not cache.
var env *envtestutil.Env

// broker is an in-process Kafka (kfake) that is the manager's default connection.
var broker *kfake.Cluster

// managerLogs holds everything the manager logged, for tests that check what the logs never contain.
var managerLogs = &syncBuffer{}

// The suite manager's timing: resources resync every resyncInterval (so drift is corrected within
// one), Kafka calls give up after kafkaRequestTimeout, deletion waits at most deletionTimeout.
const (
	resyncInterval = 2 * time.Second
	// circuitReportInterval makes a circuit report stale after 3 s.
	circuitReportInterval = time.Second
	kafkaRequestTimeout   = 3 * time.Second
	deletionTimeout       = 4 * time.Second
)

// testRunbookBaseURL is the suite manager's --alert-runbook-base-url.
const testRunbookBaseURL = "https://runbooks.test/retry"

// benchmarkLabel marks the objects of the scale test and benchmark, which run their own manager:
// the suite manager does not see them.
const benchmarkLabel = "test.retry.retryops.dev/scale"

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer = syncbuf.Buffer

func TestMain(m *testing.M) {
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	var err error
	if env, err = envtestutil.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "envtest:", err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	if broker, err = kfake.NewCluster(kfake.NumBrokers(1)); err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		return 1
	}
	defer broker.Close()

	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(io.MultiWriter(os.Stderr, managerLogs))))
	notScale, err := labels.Parse("!" + benchmarkLabel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "selector:", err)
		return 1
	}
	// The cache as cmd/manager sets it up (owned kinds by the operator's label, no Secrets, no
	// informer started by a read), but for the objects of the scale tests.
	cacheOpts := controllers.CacheOptions(nil)
	cacheOpts.DefaultLabelSelector = notScale
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  envtestutil.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cacheOpts,
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			cl, err := client.New(cfg, opts)
			return reconcileLoggingClient{Client: cl, log: suiteReconciles}, err
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		StatusRefreshInterval:   resyncInterval,
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: broker.ListenAddrs(),
		DeletionTimeout:         deletionTimeout,
		AlertRunbookBaseURL:     testRunbookBaseURL,
		CircuitReportInterval:   circuitReportInterval,
	}); err != nil {
		fmt.Fprintln(os.Stderr, "setup:", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager stopped:", err)
		}
	}()
	code := m.Run()
	cancel()
	<-done
	return code
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrl-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	return ns.Name
}

// readyCondition returns obj's Ready condition after reading obj afresh, or nil.
func readyCondition(obj client.Object, conditions func() []metav1.Condition) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return nil, err
		}
		c := meta.FindStatusCondition(conditions(), retryv1alpha1.ConditionReady)
		if c == nil || c.ObservedGeneration != obj.GetGeneration() {
			return nil, nil
		}
		return c, nil
	}
}

// eventsFor lists the events.k8s.io events about the named object.
func eventsFor(ns, name string) func() ([]eventsv1.Event, error) {
	return func() ([]eventsv1.Event, error) {
		list := &eventsv1.EventList{}
		if err := env.Client.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return nil, err
		}
		var out []eventsv1.Event
		for _, e := range list.Items {
			if e.Regarding.Name == name {
				out = append(out, e)
			}
		}
		return out, nil
	}
}
