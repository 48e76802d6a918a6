package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
)

// autoscaleCase is one autoscaling pipeline of the e2e stack: it is alone in namespace ns, named
// ns, on the source <ns>-tasks, with its policy and its own queue.
type autoscaleCase struct {
	ns         string
	partitions int
	// policy is the RetryPolicy's spec body (indented by two spaces).
	policy string
	// autoscaling is spec.autoscaling, as a flow mapping.
	autoscaling string
	// delivery is spec.delivery, as a flow mapping.
	delivery string
}

func (c autoscaleCase) source() string { return c.ns + "-tasks" }

func (c autoscaleCase) manifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + c.ns + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: ` + c.ns + `, namespace: ` + c.ns + `}
spec:` + c.policy + `
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: ` + c.ns + `-dlq, namespace: ` + c.ns + `}
spec:
  topic: {name: ` + c.source() + `.dlq, partitions: 1}
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: ` + c.ns + `, namespace: ` + c.ns + `}
spec:
  source: {topic: ` + c.source() + `, create: {partitions: ` + fmt.Sprint(c.partitions) + `}}
  retryPolicyRef: {name: ` + c.ns + `}
  deadLetterQueueRef: {name: ` + c.ns + `-dlq}
  retryTopics: {deletionPolicy: Delete}
  delivery: ` + c.delivery + `
  sink: {uri: "` + sinkURL + `"}
  autoscaling: ` + c.autoscaling + `
`
}

// scaleSample is what a scaleWatch saw of the pipeline at one moment.
type scaleSample struct {
	at time.Time
	// spec is the pipeline's spec.replicas (what kubectl scale or an HPA wrote).
	spec int32
	// deployment and ready are the Deployment's spec.replicas and status.readyReplicas.
	deployment, ready int32
	// running is how many dispatcher processes the runner runs in the namespace.
	running int
	// idle, wakeTime and dueLag (-1 when unset) are the pipeline's status.
	idle     bool
	wakeTime time.Time
	dueLag   int64
}

func (s scaleSample) String() string {
	return fmt.Sprintf("spec %d, deployment %d (%d ready), %d processes, idle %t, dueLag %d", s.spec, s.deployment, s.ready, s.running, s.idle, s.dueLag)
}

// scaleWatch samples a pipeline, its Deployment and the runner's processes in the background.
type scaleWatch struct {
	mu      sync.Mutex
	samples []scaleSample
	stop    func()
}

// watchScale samples the pipeline named ns in namespace ns every period until the test ends (or
// stop).
func watchScale(stack *devenv.Stack, ns string, period time.Duration) *scaleWatch {
	w := &scaleWatch{}
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: ns}
	depKey := client.ObjectKey{Namespace: ns, Name: ns + "-dispatcher"}
	w.stop = every(period, func() {
		s := scaleSample{at: time.Now(), dueLag: -1}
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := stack.Env.Client.Get(ctx, key, p); err != nil {
			return
		}
		s.spec = ptr.Deref(p.Spec.Replicas, 1)
		s.dueLag = ptr.Deref(p.Status.DueLag, -1)
		if a := p.Status.Autoscaling; a != nil {
			s.idle = a.IsIdle()
			if a.WakeTime != nil {
				s.wakeTime = a.WakeTime.Time
			}
		}
		d := &appsv1.Deployment{}
		if err := stack.Env.Client.Get(ctx, depKey, d); err == nil {
			s.deployment = ptr.Deref(d.Spec.Replicas, 1)
			s.ready = d.Status.ReadyReplicas
		}
		for _, k := range stack.Runner.Running() {
			if strings.HasPrefix(k, ns+"/") {
				s.running++
			}
		}
		w.mu.Lock()
		w.samples = append(w.samples, s)
		w.mu.Unlock()
	})
	return w
}

// first returns the first sample at or after from that satisfies ok.
func (w *scaleWatch) first(from time.Time, ok func(scaleSample) bool) (scaleSample, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.samples {
		if !s.at.Before(from) && ok(s) {
			return s, true
		}
	}
	return scaleSample{}, false
}

// await waits up to timeout for a sample at or after from that satisfies ok (what) and returns the
// first.
func (w *scaleWatch) await(g Gomega, from time.Time, timeout time.Duration, what string, ok func(scaleSample) bool) scaleSample {
	var s scaleSample
	g.Eventually(func() error {
		var found bool
		if s, found = w.first(from, ok); !found {
			return fmt.Errorf("not yet; last sample: %s", w.last())
		}
		return nil
	}, timeout, 50*time.Millisecond).Should(Succeed(), what)
	return s
}

func (w *scaleWatch) last() scaleSample {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.samples) == 0 {
		return scaleSample{}
	}
	return w.samples[len(w.samples)-1]
}

// maxOf is the largest f of the samples from from on.
func (w *scaleWatch) maxOf(from time.Time, f func(scaleSample) int32) int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var m int32
	for _, s := range w.samples {
		if !s.at.Before(from) {
			m = max(m, f(s))
		}
	}
	return m
}

// quantiles formats the 50th and 99th percentiles and the largest of durations, rounded to
// milliseconds, and returns the 99th.
func quantiles(d []time.Duration) (string, time.Duration) {
	if len(d) == 0 {
		return "-", 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	q := func(p int) time.Duration { return s[min((p*len(s)+99)/100, len(s))-1] }
	return fmt.Sprintf("p50 %v, p99 %v, max %v", q(50).Round(time.Millisecond), q(99).Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond)), q(99)
}
