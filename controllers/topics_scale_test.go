package controllers_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
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

// adminKeys are the Kafka requests the operator's admin client sends.
var adminKeys = []kmsg.Key{kmsg.ApiVersions, kmsg.Metadata, kmsg.DescribeConfigs, kmsg.CreateTopics, kmsg.CreatePartitions,
	kmsg.IncrementalAlterConfigs, kmsg.DeleteTopics, kmsg.DeleteRecords, kmsg.ListOffsets}

// topicChangeKeys are the requests that change topics.
var topicChangeKeys = []kmsg.Key{kmsg.CreateTopics, kmsg.CreatePartitions, kmsg.IncrementalAlterConfigs, kmsg.DeleteTopics, kmsg.DeleteRecords}

// requestCounter counts the requests a kfake cluster receives, per key, and keeps the names of the
// topics asked for in CreateTopics requests and the number of topics of each ListOffsets request.
type requestCounter struct {
	mu           sync.Mutex
	counts       map[kmsg.Key]int64
	created      []string
	offsetTopics []int
}

func countRequests(c *kfake.Cluster, keys ...kmsg.Key) *requestCounter {
	rc := &requestCounter{counts: map[kmsg.Key]int64{}}
	for _, k := range keys {
		c.ControlKey(int16(k), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			rc.mu.Lock()
			rc.counts[k]++
			switch r := req.(type) {
			case *kmsg.CreateTopicsRequest:
				for _, t := range r.Topics {
					rc.created = append(rc.created, t.Topic)
				}
			case *kmsg.ListOffsetsRequest:
				rc.offsetTopics = append(rc.offsetTopics, len(r.Topics))
			}
			rc.mu.Unlock()
			return nil, nil, false
		})
	}
	return rc
}

// foreignTopics are the topics asked for in CreateTopics requests that are not named by prefixes.
func (rc *requestCounter) foreignTopics(prefixes ...string) []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []string
	for _, t := range rc.created {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(t, p) }) {
			out = append(out, t)
		}
	}
	return out
}

// listOffsetsTopics is the number of topics of each ListOffsets request, in order.
func (rc *requestCounter) listOffsetsTopics() []int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.offsetTopics)
}

func (rc *requestCounter) snapshot() map[kmsg.Key]int64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := make(map[kmsg.Key]int64, len(rc.counts))
	for k, v := range rc.counts {
		out[k] = v
	}
	return out
}

func sum(m map[kmsg.Key]int64, keys ...kmsg.Key) int64 {
	var n int64
	for _, k := range keys {
		n += m[k]
	}
	return n
}

func diff(after, before map[kmsg.Key]int64) map[kmsg.Key]int64 {
	out := map[kmsg.Key]int64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func describeCounts(m map[kmsg.Key]int64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k.Name(), v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// scaleResult are the figures of one scale run.
type scaleResult struct {
	topics        int
	toReady       time.Duration
	adminRequests map[kmsg.Key]int64 // from start to all Ready
	writes        int64              // Kubernetes writes by the manager, from start to all Ready
	conflicts     int64              // writes refused with a conflict (stale cache), from start to all Ready
	writesByKind  string
	events        int // events recorded, from start to all Ready
	eventList     scaleEvents
	created       time.Duration // creating the objects, part of toReady
	cpuToReady    map[string]float64
	heap          memorySampler
	steadyWindow  time.Duration
	steadyAdmin   map[kmsg.Key]int64 // during the steady-state window: one offsets round, two resyncs of every resource
	// steadyReconciles are the reconciles of that window.
	steadyReconciles reconcileCount
	// steadyOffsetTopics is the number of topics of each ListOffsets request of the steady-state resync.
	steadyOffsetTopics []int
	// offsetTopics is the number of topics whose offsets the live figures read: each queue's and its
	// record of decisions', each pipeline's source and retry tiers.
	offsetTopics int
	// tierTopics is the number of retry tiers, whose due offsets the pipelines read.
	tierTopics   int
	steadyWrites int64 // writes and refused writes
	// steadyCPU is the CPU seconds of the window, by process (as cpuToReady).
	steadyCPU    map[string]float64
	steadyEvents int
	// foreignTopics are topics the manager asked kfake to create that belong to no resource of
	// the run, from start to the end of the steady-state resync.
	foreignTopics []string
}

// runScale starts a manager of its own, with its own kfake as the default connection, on the
// objects of this run only: those labelled benchmarkLabel (which the suite manager ignores) with
// the run's namespace as the value. Other tests leave objects with benchmarkLabel behind (the
// least-privilege test's queues and pipeline stay, finalizers and all). A manager selecting on the
// label alone reconciles them too, against this run's kfake, and late: objects of the initial list
// wait at low priority in the work queue behind the run's own, so they are reconciled around the
// time the run's resources are Ready, on a loaded machine within the steady-state window (the 2
// topic creations and 3 writes a CI run saw there are that pipeline's first reconcile: its source
// and retry tier, its ConfigMap, Deployment and status). It creates dlqs queues and pipelines
// pipelines (each pipeline: a created source and three retry tiers), waits until all are Ready,
// then watches one full resync at steady state. The manager's clock is a fake one, stepped by one
// interval at the start of that resync: the offsets snapshot goes stale exactly once, so the resync
// makes exactly one offsets round however long it takes on a loaded machine.
func runScale(tb testing.TB, spec scaleSpec, interval time.Duration) scaleResult {
	tb.Helper()
	dlqs, pipelines := spec.dlqs, spec.pipelines
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	apiConfig, bootstrap, requests := env.Config, []string(nil), kafkaRequests(nil)
	if spec.isolated {
		ownMemoryLimitOnly()
		own, err := envtestutil.Start()
		if err != nil {
			tb.Fatal(err)
		}
		defer func() { _ = own.Stop() }()
		apiConfig = own.Config
		bootstrap, requests = startKafkaProcess(tb)
	} else {
		c, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1))
		if err != nil {
			tb.Fatal(err)
		}
		defer c.Close()
		bootstrap, requests = c.ListenAddrs(), countRequests(c, adminKeys...)
	}

	cfg := rest.CopyConfig(apiConfig)
	cfg.QPS, cfg.Burst = 1000, 2000
	// The objects are created with a client of their own, not rate limited.
	api, err := client.New(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		tb.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scale-", Labels: map[string]string{benchmarkLabel: "true"}}}
	if err := api.Create(ctx, ns); err != nil {
		tb.Fatal(err)
	}
	ready := watchReady(ctx, tb, cfg, ns.Name)
	label := map[string]string{benchmarkLabel: ns.Name}
	var writes writeCounter
	var reconciles reconcileCounter
	// The cache as cmd/manager builds it (the owned kinds by the operator's label, the transform),
	// for the run's queues, pipelines and policies only.
	cacheOpts := controllers.CacheOptions(nil)
	cacheOpts.DefaultLabelSelector = labels.SelectorFromSet(label)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:  envtestutil.Scheme(),
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cacheOpts,
		// Not logr.Discard(): a Logger without a sink is replaced by the global one, the suite's,
		// which keeps every line in memory (managerLogs) and would be measured as the manager's heap.
		Logger:     zap.New(zap.WriteTo(io.Discard)),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		NewClient: func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			cl, err := client.New(cfg, opts)
			return readCountingClient{Client: countingClient{Client: cl, writes: &writes}, reads: &reconciles}, err
		},
	})
	if err != nil {
		tb.Fatal(err)
	}
	clk := clocktesting.NewFakeClock(time.Now())
	if err := controllers.SetupWithManager(ctx, mgr, controllers.Options{
		// As cmd/manager builds it: every resource on a connection shares one batching admin (its
		// window on the real clock: the fake one paces only the controllers).
		Kafka:                   kafka.NewBatchingFactory(franz.NewFactory(), kafka.BatchOptions{Window: kafka.DefaultBatchWindow}),
		StatusRefreshInterval:   interval,
		DefaultBootstrapServers: bootstrap,
		Clock:                   clk,
	}); err != nil {
		tb.Fatal(err)
	}
	var created time.Duration
	if spec.onExisting {
		// Created while no manager runs: the manager starts on all of them at once.
		t0 := time.Now()
		createScaleObjects(ctx, tb, api, ns.Name, label, spec)
		created = time.Since(t0)
	}
	mem := startMemory()
	mem.peakProfile = heapProfilePath(fmt.Sprintf("peak-live-%d", dlqs+pipelines))
	stopProfile := profileAPIServer(tb, apiConfig, fmt.Sprintf("ready-%d", dlqs+pipelines))
	cpuStart := cpuSeconds()
	start := time.Now()
	done := runManager(ctx, mgr)
	defer func() { cancel(); <-done }()
	if !spec.onExisting {
		createScaleObjects(ctx, tb, api, ns.Name, label, spec)
		created = time.Since(start)
	}

	g := NewWithT(tb)
	timeout := 10 * time.Minute * time.Duration(max(1, (dlqs+pipelines)/1000))
	g.Eventually(func() (int, error) { mem.sample(); return ready.count() }, timeout, 100*time.Millisecond).Should(Equal(dlqs+pipelines), "resources Ready")
	res := scaleResult{topics: dlqs + 4*pipelines, toReady: time.Since(start), created: created, writes: writes.ok.Load(), conflicts: writes.conflicts.Load(), writesByKind: writes.kinds()}
	res.cpuToReady = cpuSince(cpuStart)
	stopProfile()
	res.adminRequests = requests.snapshot()
	res.eventList = listEvents(ctx, tb, api, ns.Name)
	res.events = res.eventList.total()
	writeHeapProfile(tb, fmt.Sprintf("ready-%d", dlqs+pipelines))
	if spec.atReady != nil {
		spec.atReady(ctx, api, ns.Name)
	}
	// Said at once: at 10,000 resources the steady-state resync that follows takes minutes.
	tb.Logf("%d resources Ready after %v (created in %v); %d Kafka requests, %d Kubernetes writes, %d events; CPU seconds %v; peak heap in use %d MiB",
		dlqs+pipelines, res.toReady.Round(time.Millisecond), created.Round(time.Millisecond), sum(res.adminRequests, adminKeys...), res.writes, res.events, res.cpuToReady, mem.heapInuse>>20)
	if spec.onExisting {
		tb.Logf("(the manager started on %d resources that existed already: Ready counted from its start)", dlqs+pipelines)
	}
	if spec.readyOnly {
		res.heap = *mem
		return res
	}

	// Steady state: the clock stands still, so a resync lists no offsets but those of topics new to
	// the snapshot (a queue's first counts by state make it read its topics again, alone); settled is
	// two resyncs of every resource (counted by reconciles, not by what they ask of Kafka) without a
	// ListOffsets request.
	lastOffsets, since := int64(-1), reconciles.snapshot()
	g.Eventually(func() bool {
		mem.sample()
		now := requests.snapshot()
		if now[kmsg.ListOffsets] != lastOffsets {
			lastOffsets, since = now[kmsg.ListOffsets], reconciles.snapshot()
			return false
		}
		return reconciles.resyncedTwice(since, dlqs, pipelines)
	}, timeout, 100*time.Millisecond).Should(BeTrue(), "resyncs that list no offsets")
	res.offsetTopics, res.tierTopics = offsetTopics(ctx, tb, api, ns.Name)

	// One full resync after the offsets snapshot went stale: the round it starts, and two resyncs'
	// worth of reconciles, so that every resource resynced after the step.
	reconcilesBefore := reconciles.snapshot()
	before, writesBefore, eventsBefore := requests.snapshot(), writes.ok.Load()+writes.conflicts.Load(), res.events
	offsetsBefore := len(requests.listOffsetsTopics())
	steadyStart, steadyCPU := time.Now(), cpuSeconds()
	clk.Step(interval)
	g.Eventually(func() bool {
		mem.sample()
		now := requests.snapshot()
		return now[kmsg.ListOffsets]-before[kmsg.ListOffsets] > 0 && reconciles.resyncedTwice(reconcilesBefore, dlqs, pipelines)
	}, timeout, 100*time.Millisecond).Should(BeTrue(), "a full resync")
	res.steadyWindow, res.steadyCPU = time.Since(steadyStart), cpuSince(steadyCPU)
	after := reconciles.snapshot()
	res.steadyReconciles = reconcileCount{pipelines: after.pipelines - reconcilesBefore.pipelines, queues: after.queues - reconcilesBefore.queues}
	res.steadyAdmin = diff(requests.snapshot(), before)
	res.steadyOffsetTopics = requests.listOffsetsTopics()[offsetsBefore:]
	res.steadyWrites = writes.ok.Load() + writes.conflicts.Load() - writesBefore
	res.steadyEvents = listEvents(ctx, tb, api, ns.Name).total() - eventsBefore
	res.heap = *mem
	// The run's topics: the queues' (<namespace>.dlq.NNN and their records of decisions) and the
	// pipelines' (<namespace>.src.NNN and their retry tiers, <namespace>.cpl-NNN.retry.*).
	res.foreignTopics = requests.foreignTopics(ns.Name+".dlq.", ns.Name+".src.", ns.Name+".cpl-")
	return res
}

// offsetTopics counts the topics whose offsets the live figures of the resources in ns read.
// The second result is the pipelines' retry tiers among them.
func offsetTopics(ctx context.Context, tb testing.TB, c client.Client, ns string) (int, int) {
	tb.Helper()
	ql, pl := &retryv1alpha1.DeadLetterQueueList{}, &retryv1alpha1.ConsumerPipelineList{}
	if err := c.List(ctx, ql, client.InNamespace(ns)); err != nil {
		tb.Fatal(err)
	}
	if err := c.List(ctx, pl, client.InNamespace(ns)); err != nil {
		tb.Fatal(err)
	}
	n, tiers := 2*len(ql.Items), 0
	for _, p := range pl.Items {
		n++
		if p.Status.Topics != nil {
			tiers += len(p.Status.Topics.Retries)
		}
	}
	return n + tiers, tiers
}

func (r scaleResult) report(tb testing.TB) {
	tb.Helper()
	tb.Logf("%d topics; all Ready after %v with %d Kafka admin requests (%s), %d Kubernetes writes (%s; %d more refused with a conflict) and %d events",
		r.topics, r.toReady.Round(time.Millisecond), sum(r.adminRequests, adminKeys...), describeCounts(r.adminRequests),
		r.writes, r.writesByKind, r.conflicts, r.events)
	tb.Logf("steady state, one offsets round and %d pipeline and %d queue reconciles in %v: %d Kafka admin requests (%s), %d topic changes, %d Kubernetes writes, %d events",
		r.steadyReconciles.pipelines, r.steadyReconciles.queues, r.steadyWindow.Round(time.Millisecond), sum(r.steadyAdmin, adminKeys...), describeCounts(r.steadyAdmin),
		sum(r.steadyAdmin, topicChangeKeys...), r.steadyWrites, r.steadyEvents)
}

// TestSteadyStateResyncMakesNoWritesAndNoTopicChanges is the scale run on a small scale: once every
// resource is Ready, a full resync only describes topics and lists offsets.
func TestSteadyStateResyncMakesNoWritesAndNoTopicChanges(t *testing.T) {
	const interval = time.Second
	r := runScale(t, scaleSpec{dlqs: 10, pipelines: 10}, interval)
	r.report(t)
	if len(r.foreignTopics) > 0 {
		t.Errorf("the manager created topics of no resource of this run: %v", r.foreignTopics)
	}
	if r.steadyWrites != 0 {
		t.Errorf("a steady-state resync made %d Kubernetes writes, want 0", r.steadyWrites)
	}
	if r.steadyEvents != 0 {
		t.Errorf("a steady-state resync recorded %d events, want 0", r.steadyEvents)
	}
	if n := sum(r.steadyAdmin, topicChangeKeys...); n != 0 {
		t.Errorf("a steady-state resync made %d topic changes (%s), want 0", n, describeCounts(r.steadyAdmin))
	}
	// Offsets: the clock went on by one interval, so one round: a start and an end request, each for
	// every topic of the run, then one by timestamp for every retry tier (the due lag), not a request
	// per resource.
	if got, want := r.steadyOffsetTopics, []int{r.offsetTopics, r.offsetTopics, r.tierTopics}; !slices.Equal(got, want) {
		t.Errorf("topics of each ListOffsets request of one resync after the clock went on by one interval: %v, want %v (one round)", got, want)
	}
}
