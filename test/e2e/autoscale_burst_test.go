package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	burstRecords = 20000
	// burstCost is what the sink takes per record: with two deliveries in flight per pod, a pod
	// works off about 200 records a second, so the burst lasts long enough for the HPA (a 2s sync
	// on the local stack) to act on it.
	burstCost = 10 * time.Millisecond
	burstMax  = 4
)

// burstCase: 4 partitions, at most 4 pods, 2,000 due records per pod: 20,000 ask for 10, capped at
// 4, until fewer than 6,000 are due.
var burstCase = autoscaleCase{
	ns: "burst", partitions: 4,
	policy: `
  maxAttempts: 2
  backoff: {initialDelay: 1s, multiplier: "1", maxDelay: 1s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}`,
	autoscaling: `{minReplicas: 1, maxReplicas: 4, targetDueLagPerReplica: 2000, scaleDownStabilization: 10s}`,
	delivery:    `{ordering: Unordered, maxInFlight: 2}`,
}

// burstDelivery is one request the burst's sink answered.
type burstDelivery struct {
	at                    time.Time
	idempotency, consumed string
}

// burstSink accepts every record after burstCost and keeps every delivery of each key.
type burstSink struct {
	mu  sync.Mutex
	got map[string][]burstDelivery
}

func (s *burstSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
		return
	case <-time.After(burstCost):
	}
	d := burstDelivery{at: time.Now(), idempotency: r.Header.Get(headers.HTTPIdempotencyKey), consumed: r.Header.Get(headers.HTTPDeliveredFrom)}
	s.mu.Lock()
	if s.got == nil {
		s.got = map[string][]burstDelivery{}
	}
	key := r.Header.Get(headers.HTTPKafkaKey)
	s.got[key] = append(s.got[key], d)
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// distinct counts the keys delivered.
func (s *burstSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// twice returns the keys delivered more than once, with their deliveries, and the time of the last
// delivery.
func (s *burstSink) twice() (map[string][]burstDelivery, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	dup := map[string][]burstDelivery{}
	var last time.Time
	for k, ds := range s.got {
		if len(ds) > 1 {
			dup[k] = append([]burstDelivery(nil), ds...)
		}
		for _, d := range ds {
			last = later(last, d.at)
		}
	}
	return dup, last
}

// TestBurstScalesToMaxAndBack: 20,000 source records at once scale a pipeline from 1 pod to its
// maximum, 4, through the HPA the operator makes on its due lag (the HPA controller writes
// spec.replicas through the scale subresource; the operator's Deployment follows and the runner
// runs a process per pod), and back to 1 once they are consumed; every record reaches the sink
// exactly once.
func TestBurstScalesToMaxAndBack(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &burstSink{}
	l := serveSink(t, sink)
	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	c := burstCase
	out, err := stack.Kubectl([]byte(c.manifests("http://"+l.Addr().String()+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	w := watchScale(stack, c.ns, 50*time.Millisecond)
	t.Cleanup(w.stop)

	applied := time.Now()
	one := func(s scaleSample) bool {
		return s.spec == 1 && s.deployment == 1 && s.ready == 1 && s.running == 1 && s.dueLag == 0
	}
	w.await(g, applied, 2*time.Minute, "one ready pod with nothing due", one)
	// The operator's HPA, named in status.
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	g.Eventually(func() error {
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := stack.Env.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: c.ns}, p); err != nil {
			return err
		}
		if p.Status.Autoscaling == nil || p.Status.Autoscaling.Kind != retryv1alpha1.AutoscalerHPA {
			return fmt.Errorf("status.autoscaling %+v", p.Status.Autoscaling)
		}
		return stack.Env.Client.Get(ctx, client.ObjectKey{Namespace: c.ns, Name: p.Status.Autoscaling.Name}, hpa)
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	g.Expect(hpa.Spec.MaxReplicas).To(Equal(int32(burstMax)))

	burst := time.Now()
	g.Expect(devenv.Produce(ctx, stack.KafkaOptions(), c.source(), 0, burstRecords, 0)).To(Succeed())
	t.Logf("%d records produced in %s", burstRecords, time.Since(burst).Round(time.Millisecond))

	up := w.await(g, burst, time.Minute, "a scale-up", func(s scaleSample) bool { return s.spec > 1 })
	t.Logf("first scale-up %s after the burst: spec.replicas %d (due lag %d)", up.at.Sub(burst).Round(time.Millisecond), up.spec, up.dueLag)
	full := w.await(g, burst, time.Minute, "4 pods", func(s scaleSample) bool {
		return s.spec == burstMax && s.deployment == burstMax && s.running == burstMax
	})
	t.Logf("%d pods running %s after the burst (due lag %d)", burstMax, full.at.Sub(burst).Round(time.Millisecond), full.dueLag)

	g.Eventually(sink.distinct, 2*time.Minute, 100*time.Millisecond).Should(Equal(burstRecords), "records delivered")
	_, consumed := sink.twice()
	t.Logf("all %d records delivered %s after the burst", burstRecords, consumed.Sub(burst).Round(time.Millisecond))
	down := w.await(g, consumed, time.Minute, "back to one pod", func(s scaleSample) bool {
		return s.spec == 1 && s.deployment == 1 && s.running == 1
	})
	t.Logf("back to 1 pod %s after the last delivery (scale-down stabilization 10s); burst to 1 pod: %s",
		down.at.Sub(consumed).Round(time.Millisecond), down.at.Sub(burst).Round(time.Millisecond))
	g.Expect(w.maxOf(burst, func(s scaleSample) int32 { return s.spec })).To(Equal(int32(burstMax)), "spec.replicas beyond maxReplicas")

	// Exactly once: a duplicate could only come from a rebalance handing a partition over before
	// what was delivered from it was committed.
	dup, _ := sink.twice()
	if len(dup) > 0 {
		keys := make([]string, 0, len(dup))
		for k := range dup {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, k := range keys[:min(len(keys), 10)] {
			for _, d := range dup[k] {
				b.WriteString("\n  " + k + " at " + d.at.Format("15:04:05.000") + " idempotency " + d.idempotency + " consumed " + d.consumed)
			}
		}
		t.Errorf("%d of %d records delivered more than once (the first ten):%s", len(dup), burstRecords, b.String())
	}
}
