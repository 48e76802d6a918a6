package controllers_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
)

// everyKey is every request key: the steady tests count the admin's, the offsets', the group
// commits' and the scans' requests alike.
var everyKey = func() []kmsg.Key {
	keys := make([]kmsg.Key, kmsg.MaxKey+1)
	for k := range keys {
		keys[k] = kmsg.Key(k)
	}
	return keys
}()

func total(m map[kmsg.Key]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// steadyRun is a manager of its own on a fake clock, with one kfake cluster per connection (the
// first the default), reconciling the objects of one namespace: queues dlq-NNN and pipelines
// cpl-NNN, pipeline i sending to queue i, resource i on connection i % len(clusters).
type steadyRun struct {
	t        *testing.T
	ctx      context.Context
	api      client.Client
	ns       string
	clk      *clocktesting.FakeClock
	interval time.Duration
	clusters []*kfake.Cluster
	requests []*requestCounter
	writes   *writeCounter
	reads    *reconcileCounter
	n        int
}

func startSteadyRun(t *testing.T, n, conns int, interval time.Duration) *steadyRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &steadyRun{t: t, ctx: ctx, interval: interval, n: n, writes: &writeCounter{}, reads: &reconcileCounter{}}
	for range conns {
		c, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		r.clusters = append(r.clusters, c)
		r.requests = append(r.requests, countRequests(c, everyKey...))
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	api, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	r.api = api
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "steady-", Labels: map[string]string{benchmarkLabel: "true"}}}
	if err := api.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	r.ns = ns.Name
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  envtestutil.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: cache.Options{DefaultLabelSelector: labels.SelectorFromSet(map[string]string{benchmarkLabel: r.ns}), ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}:      {Label: labels.Everything()},
			&appsv1.Deployment{}:     {Label: labels.Everything()},
			&corev1.ServiceAccount{}: {Label: labels.Everything()},
			&rbacv1.Role{}:           {Label: labels.Everything()},
			&rbacv1.RoleBinding{}:    {Label: labels.Everything()},
		}},
		Logger:     zap.New(zap.WriteTo(io.Discard)),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			cl, err := client.New(cfg, opts)
			return readCountingClient{Client: countingClient{Client: cl, writes: r.writes}, reads: r.reads}, err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.clk = clocktesting.NewFakeClock(time.Now())
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		Kafka:                   kafka.NewBatchingFactory(franz.NewFactory(), kafka.BatchOptions{Window: kafka.DefaultBatchWindow}),
		StatusRefreshInterval:   interval,
		DefaultBootstrapServers: r.clusters[0].ListenAddrs(),
		Clock:                   r.clk,
	}); err != nil {
		t.Fatal(err)
	}
	done := runManager(ctx, mgr)
	t.Cleanup(func() { cancel(); <-done })
	r.create()
	return r
}

// create makes n queues and n pipelines, the even pipelines on one shared policy, the odd ones on
// a policy of their own.
func (r *steadyRun) create() {
	label := map[string]string{benchmarkLabel: r.ns}
	objs := []client.Object{backoffPolicy(r.ns, "shared", 3, time.Second, time.Minute)}
	for i := range r.n {
		var conn *retryv1alpha1.KafkaConnection
		if c := i % len(r.clusters); c > 0 {
			conn = &retryv1alpha1.KafkaConnection{BootstrapServers: r.clusters[c].ListenAddrs()}
		}
		// Topic names of this run's own: the topic ledger holds a name on every cluster, so a
		// topic of an earlier run's resource, on its own cluster, would be held against this one.
		q := newDLQ(r.ns, fmt.Sprintf("dlq-%03d", i), fmt.Sprintf("%s.dlq.%03d", r.ns, i))
		q.Spec.Kafka = conn
		q.Spec.Topic.Config = map[string]string{"compression.type": "zstd"}
		policy := "shared"
		if i%2 == 1 {
			policy = fmt.Sprintf("own-%03d", i)
			objs = append(objs, backoffPolicy(r.ns, policy, 3, time.Second, time.Minute))
		}
		p := newPipeline(r.ns, fmt.Sprintf("cpl-%03d", i), fmt.Sprintf("%s.src.%03d", r.ns, i), policy, q.Name)
		p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 3}
		p.Spec.Kafka = conn
		objs = append(objs, q, p)
	}
	for _, o := range objs {
		o.SetLabels(label)
		if err := r.api.Create(r.ctx, o); err != nil {
			r.t.Fatal(err)
		}
	}
}

// settle waits until every queue is Ready with its first counts and every pipeline TopicsReady with
// its dead-letter count, then until two resyncs of everything list no offsets (the clock stands
// still: nothing new to read).
func (r *steadyRun) settle() {
	r.t.Helper()
	g := NewWithT(r.t)
	g.Eventually(func() int {
		ql, pl := &retryv1alpha1.DeadLetterQueueList{}, &retryv1alpha1.ConsumerPipelineList{}
		if r.api.List(r.ctx, ql, client.InNamespace(r.ns)) != nil || r.api.List(r.ctx, pl, client.InNamespace(r.ns)) != nil {
			return -1
		}
		ready := 0
		for _, q := range ql.Items {
			if c := meta.FindStatusCondition(q.Status.Conditions, retryv1alpha1.ConditionReady); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == q.Generation && q.Status.Pending != nil {
				ready++
			}
		}
		for _, p := range pl.Items {
			if c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady); c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation && p.Status.DeadLetterMessages != nil {
				ready++
			}
		}
		return ready
	}, 5*time.Minute, 100*time.Millisecond).Should(Equal(2*r.n), "every queue and pipeline Ready")
	last, since := int64(-1), r.reads.snapshot()
	g.Eventually(func() bool {
		var offsets int64
		for _, rc := range r.requests {
			offsets += rc.snapshot()[kmsg.ListOffsets]
		}
		if offsets != last {
			last, since = offsets, r.reads.snapshot()
			return false
		}
		return r.reads.resyncedTwice(since, r.n, r.n)
	}, 5*time.Minute, 50*time.Millisecond).Should(BeTrue(), "two resyncs that list no offsets")
}

// requestsSnapshot is every cluster's count of requests.
func (r *steadyRun) requestsSnapshot() []map[kmsg.Key]int64 {
	out := make([]map[kmsg.Key]int64, len(r.requests))
	for i, rc := range r.requests {
		out[i] = rc.snapshot()
	}
	return out
}

// since is what each cluster received since before.
func (r *steadyRun) since(before []map[kmsg.Key]int64) []map[kmsg.Key]int64 {
	now := r.requestsSnapshot()
	for i := range now {
		now[i] = diff(now[i], before[i])
	}
	return now
}

// awaitResyncs waits until every queue and pipeline resynced twice since before (so each once
// whole), and done holds.
func (r *steadyRun) awaitResyncs(before reconcileCount, done func() bool, desc string) {
	r.t.Helper()
	NewWithT(r.t).Eventually(func() bool {
		return done() && r.reads.resyncedTwice(before, r.n, r.n)
	}, 5*time.Minute, 50*time.Millisecond).Should(BeTrue(), desc)
}
