package controllers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// kafkaRequests are the admin requests a scale run's broker received.
type kafkaRequests interface {
	snapshot() map[kmsg.Key]int64
	// foreignTopics are the topics asked for in CreateTopics requests not named by prefixes.
	foreignTopics(prefixes ...string) []string
	// listOffsetsTopics is the number of topics of each ListOffsets request, in order.
	listOffsetsTopics() []int
}

var (
	buildKafkaOnce sync.Once
	kafkaBinary    string
	buildKafkaErr  error
)

// startKafkaProcess runs hack/kafka as a child process, so that the broker's heap (every topic of
// the run) is not in the test process's, whose heap is then the manager's and the test's client.
// The child is named "kafka" in cpuSeconds.
func startKafkaProcess(tb testing.TB) ([]string, kafkaRequests) {
	tb.Helper()
	buildKafkaOnce.Do(func() {
		dir, err := os.MkdirTemp("", "scale-kafka-")
		if err != nil {
			buildKafkaErr = err
			return
		}
		kafkaBinary = filepath.Join(dir, "kafka")
		cmd := exec.Command("go", "build", "-o", kafkaBinary, "./hack/kafka")
		cmd.Dir = envtestutil.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildKafkaErr = fmt.Errorf("building hack/kafka: %w: %s", err, out)
		}
	})
	if buildKafkaErr != nil {
		tb.Fatal(buildKafkaErr)
	}
	// 10 partitions by default, as an in-process kfake.
	cmd := exec.Command(kafkaBinary, "--port", "0", "--requests-addr", "127.0.0.1:0", "--default-partitions", "10")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	var broker, requests string
	lines := bufio.NewScanner(stdout)
	for (broker == "" || requests == "") && lines.Scan() {
		if rest, ok := strings.CutPrefix(lines.Text(), "kafka: requests on "); ok {
			requests = rest
		}
		if rest, ok := strings.CutPrefix(lines.Text(), "kafka: listening on "); ok {
			broker, _, _ = strings.Cut(rest, " ")
		}
	}
	if broker == "" || requests == "" {
		tb.Fatalf("hack/kafka did not say where it listens (broker %q, requests %q)", broker, requests)
	}
	go func() {
		for lines.Scan() { //nolint:revive // drained so the child never blocks on a full pipe
		}
	}()
	return []string{broker}, remoteRequests{tb: tb, base: requests}
}

// remoteRequests reads the counts of a hack/kafka child (--requests-addr).
type remoteRequests struct {
	tb   testing.TB
	base string
}

func (r remoteRequests) get(path string, v any) {
	r.tb.Helper()
	resp, err := http.Get(r.base + path) //nolint:gosec,noctx // the test's own child, on loopback
	if err != nil {
		r.tb.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		r.tb.Fatalf("GET %s%s: %s", r.base, path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		r.tb.Fatal(err)
	}
}

func (r remoteRequests) snapshot() map[kmsg.Key]int64 {
	var counts map[string]int64
	r.get("/counts", &counts)
	out := make(map[kmsg.Key]int64, len(counts))
	for k, v := range counts {
		n, err := strconv.Atoi(k)
		if err != nil {
			r.tb.Fatalf("request key %q: %v", k, err)
		}
		out[kmsg.Key(n)] = v
	}
	return out
}

func (r remoteRequests) foreignTopics(prefixes ...string) []string {
	var created []string
	r.get("/created", &created)
	var out []string
	for _, t := range created {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(t, p) }) {
			out = append(out, t)
		}
	}
	return out
}

func (r remoteRequests) listOffsetsTopics() []int {
	var out []int
	r.get("/list-offsets", &out)
	return out
}

// scaleQueueReady: Ready, and its first counts by state from the record of decisions in status
// (status.pending), which a reconcile that could not read them yet leaves to the next.
func scaleQueueReady(q *retryv1alpha1.DeadLetterQueue) bool {
	c := meta.FindStatusCondition(q.Status.Conditions, retryv1alpha1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == q.Generation && q.Status.Pending != nil
}

// scalePipelineReady: TopicsReady, since without a controller manager its Deployment never becomes
// ready (and Ready with it), and the live figures settled: deadLetterMessages follows the queue's
// first count.
func scalePipelineReady(p *retryv1alpha1.ConsumerPipeline) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation && p.Status.DeadLetterMessages != nil
}

// readyCount counts the queues and pipelines of a namespace that are Ready (scaleQueueReady,
// scalePipelineReady) as their watch events arrive: no List per poll, which at 10,000 resources loaded
// the API server and the test process as much as part of what the run measures.
type readyCount struct {
	mu    sync.Mutex
	ready map[string]bool // kind/name
	n     int
	err   error
}

func (r *readyCount) count() (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.err
}

func (r *readyCount) set(key string, ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready[key] != ready {
		r.ready[key] = ready
		if ready {
			r.n++
		} else {
			r.n--
		}
	}
}

// watchReady starts counting the Ready queues and pipelines of ns, from now (ns must hold none
// yet, or they are counted only when they next change), until ctx ends.
func watchReady(ctx context.Context, tb testing.TB, cfg *rest.Config, ns string) *readyCount {
	tb.Helper()
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: envtestutil.Scheme()})
	if err != nil {
		tb.Fatal(err)
	}
	r := &readyCount{ready: map[string]bool{}}
	follow := func(list client.ObjectList, ready func(any) (string, bool, bool)) {
		if err := c.List(ctx, list, client.InNamespace(ns), client.Limit(1)); err != nil {
			tb.Fatal(err)
		}
		w, err := watchtools.NewRetryWatcherWithContext(ctx, list.(metav1.ListInterface).GetResourceVersion(), listWatcher{c: c, list: list, ns: ns})
		if err != nil {
			tb.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						return
					}
					switch ev.Type {
					case watch.Added, watch.Modified:
						if key, ok, known := ready(ev.Object); known {
							r.set(key, ok)
						}
					case watch.Deleted:
						if key, _, known := ready(ev.Object); known {
							r.set(key, false)
						}
					case watch.Error:
						r.mu.Lock()
						r.err = fmt.Errorf("watching %T: %v", list, ev.Object)
						r.mu.Unlock()
					}
				}
			}
		}()
	}
	follow(&retryv1alpha1.DeadLetterQueueList{}, func(o any) (string, bool, bool) {
		q, ok := o.(*retryv1alpha1.DeadLetterQueue)
		if !ok {
			return "", false, false
		}
		return "DeadLetterQueue/" + q.Name, scaleQueueReady(q), true
	})
	follow(&retryv1alpha1.ConsumerPipelineList{}, func(o any) (string, bool, bool) {
		p, ok := o.(*retryv1alpha1.ConsumerPipeline)
		if !ok {
			return "", false, false
		}
		return "ConsumerPipeline/" + p.Name, scalePipelineReady(p), true
	})
	return r
}

// listWatcher watches one kind in one namespace for a RetryWatcher.
type listWatcher struct {
	c    client.WithWatch
	list client.ObjectList
	ns   string
}

func (l listWatcher) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return l.c.Watch(ctx, l.list.DeepCopyObject().(client.ObjectList), &client.ListOptions{Namespace: l.ns, Raw: &opts})
}
