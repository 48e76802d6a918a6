package controllers_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// scaleSpec is the shape of one scale run.
type scaleSpec struct {
	dlqs, pipelines int
	// sharedPolicies, when set, makes the even pipelines share that many RetryPolicies and gives
	// each odd one a policy of its own, and creates every pipeline before the objects it refers to
	// (as `kubectl apply -f dir` does: ConsumerPipeline sorts first). Otherwise one policy, the
	// queues, then the pipelines.
	sharedPolicies int
	// readyOnly ends the run once every resource is Ready, without the steady-state resync.
	readyOnly bool
	// isolated runs on an API server of its own and a kfake in a child process (hack/kafka), so
	// that the suite manager caches none of the run's children and the process's heap holds no
	// topic: its memory figures are the run's manager's (see memorySampler).
	isolated bool
	// onExisting creates every object before the manager starts (an operator installed or upgraded
	// onto a cluster holding them): Ready is counted from the manager's start.
	onExisting bool
	// atReady, when set, is called once every resource is Ready, with the run's API client and
	// namespace (the floor benchmark reads the children made there).
	atReady func(ctx context.Context, api client.Client, ns string)
	// minimalFloor makes benchmarkFloor write only what no design could leave out (see
	// BenchmarkFloorMinimal500DLQsAnd500Pipelines).
	minimalFloor bool
}

func (s scaleSpec) policyOf(i int) string {
	if s.sharedPolicies == 0 {
		return "policy"
	}
	if i%2 == 0 {
		return fmt.Sprintf("shared-%d", (i/2)%s.sharedPolicies)
	}
	return fmt.Sprintf("own-%03d", i)
}

// createScaleObjects creates the objects of spec in ns, labelled label, with a few writers at once
// so that creating them is not most of the time to Ready.
func createScaleObjects(ctx context.Context, tb testing.TB, api client.Client, ns string, label map[string]string, spec scaleSpec) {
	tb.Helper()
	writeAll(ctx, tb, scaleObjects(ns, spec), func(ctx context.Context, o client.Object) error {
		o.SetLabels(label)
		if err := api.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
		return nil
	})
}

// scaleObjects are makers of the objects of spec in ns, in the order they are created.
func scaleObjects(ns string, spec scaleSpec) []func() client.Object {
	policy := func(name string) client.Object { return backoffPolicy(ns, name, 4, time.Second, time.Minute) }
	queue := func(i int) client.Object {
		return newDLQ(ns, fmt.Sprintf("dlq-%03d", i), fmt.Sprintf("%s.dlq.%03d", ns, i))
	}
	pipeline := func(i int) client.Object {
		p := newPipeline(ns, fmt.Sprintf("cpl-%03d", i), fmt.Sprintf("%s.src.%03d", ns, i), spec.policyOf(i), fmt.Sprintf("dlq-%03d", i%max(spec.dlqs, 1)))
		p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 3}
		return p
	}
	// Made as they are sent: at 10,000 the objects themselves would be tens of MB of the heap measured.
	var objs []func() client.Object
	add := func(f func() client.Object) { objs = append(objs, f) }
	if spec.sharedPolicies == 0 {
		add(func() client.Object { return policy("policy") })
		for i := range spec.dlqs {
			add(func() client.Object { return queue(i) })
		}
		for i := range spec.pipelines {
			add(func() client.Object { return pipeline(i) })
		}
	} else {
		for i := range max(spec.dlqs, spec.pipelines) {
			if i < spec.pipelines {
				add(func() client.Object { return pipeline(i) })
			}
			if i < spec.dlqs {
				add(func() client.Object { return queue(i) })
			}
			if i < spec.pipelines && i%2 == 1 {
				add(func() client.Object { return policy(spec.policyOf(i)) })
			}
		}
		for i := range spec.sharedPolicies {
			add(func() client.Object { return policy(fmt.Sprintf("shared-%d", i)) })
		}
	}
	return objs
}

// writeAll hands the objects objs makes to 8 writers calling write, and fails tb with the first error.
func writeAll(ctx context.Context, tb testing.TB, objs []func() client.Object, write func(context.Context, client.Object) error) {
	tb.Helper()
	work := make(chan client.Object)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 8 {
		wg.Go(func() {
			for o := range work {
				if err := write(ctx, o); err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, o := range objs {
		work <- o()
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		tb.Fatal(firstErr)
	}
}

// ownMemoryLimitOnly keeps a GOMEMLIMIT given to a benchmark to this process, the manager's (the
// runtime read it at start): envtest's API server and etcd, Go programs started after this, would
// otherwise inherit it and collect under the manager's limit (at 10,000 resources the API server
// spent 709 CPU-s to Ready under it, against 410 without).
func ownMemoryLimitOnly() { _ = os.Unsetenv("GOMEMLIMIT") }

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// memorySampler keeps the peak heap and resident memory of this process, sampled at each poll of a
// scale run, and what they were when the run's manager started (base*). In an isolated run (own
// API server, kfake in a child process) the process holds the run's manager and the test's client
// (counters, the ready watch's map of names), plus what was there before: the idle suite manager on
// the suite's API server, its kfake without topics, envtest's client; the base figures are that.
// Between two polls the heap may peak unseen; the live heap (what the last GC kept) bounds what a
// GOMEMLIMIT must leave room for.
type memorySampler struct {
	heapInuse, heapAlloc, heapLive, rss uint64
	baseInuse, baseLive, baseRSS        uint64
	// peakProfile, when set, is rewritten with the heap profile (as of the last GC) each time the
	// live heap grows by a quarter: what the manager holds at its peak, which comes before Ready.
	peakProfile  string
	profiledLive uint64
}

// startMemory collects garbage, takes the base figures and resets the process's peak resident
// memory (VmHWM), so that VmHWM at the end is this run's.
func startMemory() *memorySampler {
	runtime.GC()
	m := &memorySampler{}
	m.sample()
	m.baseInuse, m.baseLive, m.baseRSS = m.heapInuse, m.heapLive, m.rss
	// 5 resets VmHWM to the current resident size (proc(5), clear_refs).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return m
}

func (m *memorySampler) sample() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.heapInuse, m.heapAlloc = max(m.heapInuse, ms.HeapInuse), max(m.heapAlloc, ms.HeapAlloc)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		m.heapLive = max(m.heapLive, live[0].Value.Uint64())
	}
	if m.peakProfile != "" && m.heapLive > m.profiledLive+m.profiledLive/4 {
		if f, err := os.Create(m.peakProfile); err == nil {
			_ = pprof.Lookup("heap").WriteTo(f, 0)
			_ = f.Close()
			m.profiledLive = m.heapLive
		}
	}
	m.rss = max(m.rss, procStatus("VmRSS"))
}

// vmHWM is this process's peak resident memory in bytes (/proc/self/status VmHWM), 0 when unknown:
// since the last startMemory, or since the process started.
func vmHWM() uint64 { return procStatus("VmHWM") }

// procStatus is a field of /proc/self/status in bytes (those given in kB), 0 when unknown.
func procStatus(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

// heapProfilePath is $SCALE_HEAP_PROFILE_DIR/heap-<name>.pprof, "" when that variable is not set.
func heapProfilePath(name string) string {
	dir := os.Getenv("SCALE_HEAP_PROFILE_DIR")
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, "heap-"+name+".pprof")
}

// writeHeapProfile writes this process's heap profile (after a GC) to $SCALE_HEAP_PROFILE_DIR/
// heap-<name>.pprof when that variable is set: `go tool pprof -top` of it says what the manager holds.
func writeHeapProfile(tb testing.TB, name string) {
	tb.Helper()
	dir := os.Getenv("SCALE_HEAP_PROFILE_DIR")
	if dir == "" {
		return
	}
	runtime.GC()
	path := filepath.Join(dir, "heap-"+name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("heap profile: %s", path)
}

// cpuSeconds is the CPU time (user and system) used so far by this process ("test", the manager
// within it) and by each of its children by name (envtest's kube-apiserver and etcd).
func cpuSeconds() map[string]float64 {
	out := map[string]float64{}
	self := os.Getpid()
	if _, _, t, ok := procStat(filepath.Join("/proc", strconv.Itoa(self), "stat")); ok {
		out["test"] = t
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		if name, ppid, t, ok := procStat(p); ok && ppid == self {
			out[name] += t
		}
	}
	return out
}

// procStat reads a /proc/<pid>/stat: the command's name, its parent and its CPU seconds.
func procStat(path string) (string, int, float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", 0, 0, false
	}
	open, closing := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return "", 0, 0, false
	}
	// After the name: state, ppid, ... utime is the 12th field after it, stime the 13th.
	f := strings.Fields(string(b[closing+1:]))
	if len(f) < 13 {
		return "", 0, 0, false
	}
	ppid, _ := strconv.Atoi(f[1])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	const userHZ = 100 // clock ticks per second on Linux
	return string(b[open+1 : closing]), ppid, (utime + stime) / userHZ, true
}

// cpuSince is the CPU seconds used since start, per process.
func cpuSince(start map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range cpuSeconds() {
		out[k] = v - start[k]
	}
	return out
}

// scaleEvents are the events recorded in a run's namespace, series counted.
type scaleEvents struct {
	byType map[string]int
	// perResource counts each object's events (kind/name).
	perResource map[string]int
	// warnings counts the Warning events by reason and message, digits replaced by N.
	warnings map[string]int
	// byReason counts the events by kind of object, type and reason ("DeadLetterQueue Normal Ready").
	byReason map[string]int
	// notes are each object's events (kind/name) as "reason: note", series counted.
	notes map[string][]string
}

var digits = regexp.MustCompile(`[0-9]+`)

// listEvents lists the events of ns.
func listEvents(ctx context.Context, tb testing.TB, c client.Client, ns string) scaleEvents {
	tb.Helper()
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		tb.Fatal(err)
	}
	ev := scaleEvents{byType: map[string]int{}, perResource: map[string]int{}, warnings: map[string]int{}, byReason: map[string]int{}, notes: map[string][]string{}}
	for _, e := range list.Items {
		n := 1
		if e.Series != nil {
			n = int(e.Series.Count)
		}
		ev.byType[e.Type] += n
		ev.perResource[e.Regarding.Kind+"/"+e.Regarding.Name] += n
		ev.byReason[e.Regarding.Kind+" "+e.Type+" "+e.Reason] += n
		for range n {
			ev.notes[e.Regarding.Kind+"/"+e.Regarding.Name] = append(ev.notes[e.Regarding.Kind+"/"+e.Regarding.Name], e.Reason+": "+e.Note)
		}
		if e.Type == corev1.EventTypeWarning {
			ev.warnings[e.Reason+": "+digits.ReplaceAllString(e.Note, "N")] += n
		}
	}
	return ev
}

func (e scaleEvents) total() int {
	return e.byType[corev1.EventTypeNormal] + e.byType[corev1.EventTypeWarning]
}

// maxPerResource is the most events one object got.
func (e scaleEvents) maxPerResource() int {
	n := 0
	for _, v := range e.perResource {
		n = max(n, v)
	}
	return n
}

// describeReasons lists the events by kind, type and reason with their counts, most first.
func (e scaleEvents) describeReasons() string { return describeTally(e.byReason) }

// describeWarnings lists the Warning events' reasons and messages with their counts, most first.
func (e scaleEvents) describeWarnings() string { return describeTally(e.warnings) }

func describeTally(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %5d  %s", m[k], k)
	}
	return b.String()
}

// reconcileCounter counts the scale manager's reconciles of queues and pipelines by the cached
// reads that begin them, so that a resync is known whatever it asks of Kafka. A pipeline is read
// by its own reconcile only; a queue by its own and twice by each reconcile of a pipeline sending
// dead letters to it (its reference, then its dead-letter count).
type reconcileCounter struct {
	pipelineReads, queueReads atomic.Int64
}

type reconcileCount struct{ pipelines, queues int64 }

func (rc *reconcileCounter) snapshot() reconcileCount {
	p := rc.pipelineReads.Load()
	return reconcileCount{pipelines: p, queues: rc.queueReads.Load() - 2*p}
}

// resyncedTwice reports whether there were, since before, reconciles enough for every queue and
// pipeline to be reconciled twice.
func (rc *reconcileCounter) resyncedTwice(before reconcileCount, dlqs, pipelines int) bool {
	now := rc.snapshot()
	return now.pipelines-before.pipelines >= int64(2*pipelines) && now.queues-before.queues >= int64(2*dlqs)
}

// readCountingClient counts in reads the Gets of queues and pipelines.
type readCountingClient struct {
	client.Client
	reads *reconcileCounter
}

func (c readCountingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	switch obj.(type) {
	case *retryv1alpha1.ConsumerPipeline:
		c.reads.pipelineReads.Add(1)
	case *retryv1alpha1.DeadLetterQueue:
		c.reads.queueReads.Add(1)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}
