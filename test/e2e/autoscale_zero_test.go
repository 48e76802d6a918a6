package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	zeroRecords  = 100
	zeroDelay    = 30 * time.Second
	zeroWakeLead = 10 * time.Second
	// zeroMaxLateness bounds the 99th percentile of how late a retry is delivered after its due
	// time: a retry that waited for a sleeping consumer would be late by the consumer's start (the
	// runner's pod pickup, the process's start and its group join: seconds).
	zeroMaxLateness = time.Second
)

// zeroCase: every record fails once (503) and is retried once, 30s later without jitter, from the
// one retry tier; nothing due for 5s idles the pipeline, which wakes 10s before a retry is due.
var zeroCase = autoscaleCase{
	ns: "zero", partitions: 2,
	policy: `
  maxAttempts: 2
  backoff: {initialDelay: 30s, multiplier: "1", maxDelay: 30s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}`,
	autoscaling: `{minReplicas: 0, maxReplicas: 2, scaleDownStabilization: 5s, wakeLead: 10s}`,
	delivery:    `{ordering: Unordered, maxInFlight: 100}`,
}

// TestScaleToZeroWakesBeforeRetriesAreDue: a pipeline with minReplicas 0 idles with nothing to do
// (no process), wakes on source records, idles again while its retries wait in their 30s tier (the
// test sees the Deployment at 0 and no process), says when it will wake, and runs a consumer again
// before the first retry is due; every retry is delivered at or after its due time, and none late
// by more than a consumer's ordinary scheduling.
func TestScaleToZeroWakesBeforeRetriesAreDue(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &devenv.DemoSink{Transient: func(int) int { return 1 }}
	l := serveSink(t, sink)
	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	c := zeroCase
	out, err := stack.Kubectl([]byte(c.manifests("http://"+l.Addr().String()+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	w := watchScale(stack, c.ns, 50*time.Millisecond)
	t.Cleanup(w.stop)

	// Nothing to do: the pipeline idles, no process runs, and with no retry waiting no wake time.
	applied := time.Now()
	idle := func(s scaleSample) bool { return s.idle && s.deployment == 0 && s.running == 0 }
	first := w.await(g, applied, 2*time.Minute, "idle with nothing to do", idle)
	g.Expect(first.wakeTime).To(BeZero(), "no retry waits: no wake time")
	t.Logf("idle with nothing to do %s after the pipeline was applied", first.at.Sub(applied).Round(time.Millisecond))
	tier := zeroTier(ctx, t, stack)

	// Source records wake it; each first delivery fails and goes to the tier.
	produced := time.Now()
	g.Expect(devenv.Produce(ctx, stack.KafkaOptions(), c.source(), 0, zeroRecords, 0)).To(Succeed())
	g.Eventually(sink.Requests, time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", zeroRecords))
	firstAttempt, lastAttempt := time.Time{}, time.Time{}
	for n := range zeroRecords {
		at := sink.Attempts(devenv.DemoKey(n))
		g.Expect(at).NotTo(BeEmpty(), "record %d", n)
		if firstAttempt.IsZero() || at[0].Before(firstAttempt) {
			firstAttempt = at[0]
		}
		lastAttempt = later(lastAttempt, at[0])
	}
	t.Logf("woken by source records: first delivery %s after the 100 were produced", firstAttempt.Sub(produced).Round(time.Millisecond))

	// The due times, from the tier's records (each record's retryops.due header).
	due := readDue(ctx, t, stack, tier, zeroRecords)
	var firstDue time.Time
	for _, d := range due {
		if firstDue.IsZero() || d.Before(firstDue) {
			firstDue = d
		}
	}

	// Idle again while they wait, before the first is due, with the wake time in status.
	asleep := w.await(g, lastAttempt, zeroDelay, "idle while the retries wait", func(s scaleSample) bool { return idle(s) && !s.wakeTime.IsZero() })
	g.Expect(asleep.at).To(BeTemporally("<", firstDue), "the pipeline idled only once a retry was due")
	g.Expect(asleep.wakeTime).To(BeTemporally("~", firstDue.Add(-zeroWakeLead), time.Second),
		"wakeTime should be the wake lead before the earliest due time (truncated to the second)")
	t.Logf("idle again %s after the last first delivery; wakeTime %s = first due %s - %s (%s after the records were produced)",
		asleep.at.Sub(lastAttempt).Round(time.Millisecond), asleep.wakeTime.Format(time.TimeOnly), firstDue.Format("15:04:05.000"),
		firstDue.Sub(asleep.wakeTime).Round(time.Millisecond), asleep.wakeTime.Sub(produced).Round(time.Millisecond))

	// Awake before the first retry is due: a process, then a ready pod.
	woke := w.await(g, asleep.at, 2*zeroDelay, "a consumer again", func(s scaleSample) bool { return s.running > 0 })
	g.Expect(woke.at).To(BeTemporally("<", firstDue), "no consumer ran before the first retry was due")
	ready := w.await(g, asleep.at, 2*zeroDelay, "a ready pod again", func(s scaleSample) bool { return s.ready > 0 })
	g.Expect(ready.at).To(BeTemporally("<", firstDue), "the woken pod was not ready before the first retry was due")
	t.Logf("consumer process started %s before the first due time (wakeTime + %s), its pod ready %s before it",
		firstDue.Sub(woke.at).Round(time.Millisecond), woke.at.Sub(asleep.wakeTime).Round(time.Millisecond), firstDue.Sub(ready.at).Round(time.Millisecond))

	// Every retry at or after its due time, and within its window (no jitter: the due time itself).
	g.Eventually(sink.Succeeded, 2*zeroDelay, 100*time.Millisecond).Should(Equal(zeroRecords))
	var late []time.Duration
	for n := range zeroRecords {
		key := devenv.DemoKey(n)
		at := sink.Attempts(key)
		g.Expect(at).To(HaveLen(2), "record %s", key)
		g.Expect(at[1]).NotTo(BeTemporally("<", due[key]), "record %s retried before its due time", key)
		late = append(late, at[1].Sub(due[key]))
	}
	figures, p99 := quantiles(late)
	t.Logf("lateness of the %d retries after their due time: %s", zeroRecords, figures)
	g.Expect(p99).To(BeNumerically("<", zeroMaxLateness), "retries late: %s", figures)

	// Nothing waits any more: idle again, with no wake time.
	done := lastOf(sink)
	again := w.await(g, done, time.Minute, "idle once the retries are delivered", func(s scaleSample) bool { return idle(s) && s.wakeTime.IsZero() })
	t.Logf("idle once more %s after the last retry, with no wake time", again.at.Sub(done).Round(time.Millisecond))
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Name: c.ns, Namespace: c.ns}}
	g.Expect(stack.Env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	t.Logf("status.autoscaling.message: %s", p.Status.Autoscaling.Message)

	// Idling and waking are normal progress: Normal events only, never a Warning, from the first
	// idle on (before it, the pipeline's start may wait for its queue's topic).
	evs := &eventsv1.EventList{}
	g.Expect(stack.Env.Client.List(ctx, evs, client.InNamespace(c.ns))).To(Succeed())
	reasons := map[string]int{}
	for _, e := range evs.Items {
		last := e.EventTime.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		}
		if e.Regarding.Kind != "ConsumerPipeline" || last.Before(first.at) {
			continue
		}
		reasons[e.Type+" "+e.Reason]++
		g.Expect(e.Type).NotTo(Equal("Warning"), "a Warning event for normal progress: %s %s", e.Reason, e.Note)
	}
	g.Expect(reasons).To(HaveKey("Normal ScaledToZero"))
	g.Expect(reasons).To(HaveKey("Normal Woke"))
	t.Logf("the pipeline's events: %v", reasons)
}

// zeroTier waits for zeroCase's pipeline to have its one retry tier and returns its topic.
func zeroTier(ctx context.Context, t *testing.T, stack *devenv.Stack) string {
	t.Helper()
	p := &retryv1alpha1.ConsumerPipeline{}
	var tier string
	NewWithT(t).Eventually(func() error {
		if err := stack.Env.Client.Get(ctx, client.ObjectKey{Namespace: zeroCase.ns, Name: zeroCase.ns}, p); err != nil {
			return err
		}
		if p.Status.Topics == nil || len(p.Status.Topics.Retries) != 1 {
			return fmt.Errorf("retry tiers %+v", p.Status.Topics)
		}
		tier = p.Status.Topics.Retries[0].Name
		return nil
	}, time.Minute, 100*time.Millisecond).Should(Succeed())
	return tier
}

// readDue reads topic from the start until it has n distinct keys and returns each key's due time
// (its first record's retryops.due).
func readDue(ctx context.Context, t *testing.T, stack *devenv.Stack, topic string, n int) map[string]time.Time {
	t.Helper()
	g := NewWithT(t)
	cl, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	due := map[string]time.Time{}
	g.Eventually(func() int {
		pollCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		cl.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key != headers.Due {
					continue
				}
				d, err := headers.ParseTime(string(h.Value))
				if _, seen := due[string(r.Key)]; err == nil && !seen {
					due[string(r.Key)] = d
				}
			}
		})
		return len(due)
	}, time.Minute, 10*time.Millisecond).Should(Equal(n), "due times read from %s", topic)
	return due
}

// lastOf is the time of the last delivery of the records 0..zeroRecords-1 the sink received.
func lastOf(sink *devenv.DemoSink) time.Time {
	var last time.Time
	for n := range zeroRecords {
		for _, at := range sink.Attempts(devenv.DemoKey(n)) {
			last = later(last, at)
		}
	}
	return last
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
