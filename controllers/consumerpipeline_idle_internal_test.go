package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/kafkafake"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/render"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
)

// A pipeline with minReplicas 0, stepped on an injected clock: it idles once nothing has been due
// for the stabilization window, wakes wakeLead before a retry waiting in its tier comes due (the
// reconcile is requeued for exactly then), stays up a window, idles again with nothing waiting, and
// wakes when source records arrive. Each change is one Normal event.
func TestPipelineIdlesAtZeroAndWakesBeforeTheEarliestDueRetry(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakePassiveClock(start)
	f := kafkafake.New()
	const source, tier, group = "orders", "team.orders.retry.1", "team.orders"
	const delay, window, lead = 10 * time.Minute, 2 * time.Minute, 30 * time.Second
	f.AddTopic(source, 2, 1, nil)
	f.AddTopic(tier, 2, 1, nil)
	f.Produce(source, 0, 2)
	conn := kafka.Connection{BootstrapServers: []string{"fake:9092"}}

	rec := events.NewFakeRecorder(10)
	r := &ConsumerPipelineReconciler{}
	r.Client = fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build()
	r.Recorder, r.Clock, r.RefreshInterval = rec, clk, time.Second
	r.Kafka = &kafkaAccess{Offsets: kafkastats.NewOffsets(clk), Commits: kafkastats.NewCommits(clk), Due: kafkastats.NewDueOffsets(clk)}
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{Source: retryv1alpha1.PipelineSource{Topic: source}, DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "dlq"},
			Autoscaling: &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3,
				ScaleDownStabilization: &metav1.Duration{Duration: window}, WakeLead: &metav1.Duration{Duration: lead}}}}
	// step reconciles at the clock's time as the Autoscaling step does, keeping the status between
	// steps; it returns whether the Deployment runs no pod and when the reconcile is requeued.
	step := func() (idle bool, wakeAfter time.Duration) {
		refs := pipelineRefs{tiers: dispatchercfg.Tiers{{Name: tier, Delay: sdkpolicy.D(delay), Earliest: sdkpolicy.D(delay), Latest: sdkpolicy.D(delay)}}}
		topics := pipelineTopics{sourcePartitions: 2, retries: []retryv1alpha1.RetryTopicStatus{{Name: tier, Delay: metav1.Duration{Duration: delay}, Partitions: 2}}}
		live := r.figures(ctx, p, refs, topics, &kafkaClient{admin: f, connKey: "conn"})
		st := &retryv1alpha1.PipelineAutoscalingStatus{}
		if prev := p.Status.Autoscaling; prev != nil {
			st = prev.DeepCopy()
		}
		wakeAfter = r.decideIdle(ctx, p, st, render.AutoscalingOf(p, 2), live)
		p.Status.DueLag = live.dueLag
		p.Status.Autoscaling = st
		g.Expect(r.renderInputs(p, refs, nil, nil, st).Idle).To(Equal(st.IsIdle()))
		return st.IsIdle(), wakeAfter
	}
	event := func() string {
		select {
		case e := <-rec.Events:
			return e
		default:
			return ""
		}
	}
	at := func(d time.Duration) { clk.SetTime(start.Add(d)) }
	idleNow := func() bool {
		idle, _ := step()
		return idle
	}

	g.Expect(idleNow()).To(BeFalse(), "two source records are due")
	// At 1m the group consumed them and wrote one retry to the tier: due at 11m.
	at(time.Minute)
	f.Commit(group, source, 0, 2)
	_, err := f.ProduceRecords(ctx, conn, tier, []kafka.ProduceRecord{{Partition: 1, Timestamp: start.Add(time.Minute)}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(idleNow()).To(BeFalse(), "quiet for 0s of the 2m window")
	g.Expect(p.Status.Autoscaling.WakeTime.Time).To(BeTemporally("==", start.Add(11*time.Minute-lead)))

	// Last active at 0 (the two source records due).
	at(2*time.Minute - time.Second)
	g.Expect(idleNow()).To(BeFalse(), "quiet for 1m59s")
	at(2 * time.Minute)
	idle, wakeAfter := step()
	g.Expect(idle).To(BeTrue(), "quiet for the window, the retry due in 9m")
	g.Expect(wakeAfter).To(Equal(9*time.Minute-lead), "requeued for the wake time")
	g.Expect(event()).To(And(HavePrefix("Normal ScaledToZero"), ContainSubstring("2026-11-26T10:10:30Z")))

	at(11*time.Minute - lead - time.Second)
	g.Expect(idleNow()).To(BeTrue())
	at(11*time.Minute - lead)
	g.Expect(idleNow()).To(BeFalse(), "woken wakeLead before the retry is due")
	g.Expect(event()).To(And(HavePrefix("Normal Woke"), ContainSubstring("2026-11-26T10:11:00Z")))

	// The retry is delivered at 11m, between two refreshes: the woken consumer stays the window.
	at(11 * time.Minute)
	f.Commit(group, tier, 1, 1)
	at(12*time.Minute + lead - time.Second)
	g.Expect(idleNow()).To(BeFalse(), "up for the window after waking")
	at(12*time.Minute + lead)
	idle, wakeAfter = step()
	g.Expect(idle).To(BeTrue())
	g.Expect(wakeAfter).To(BeZero(), "nothing waits: no wake time")
	g.Expect(p.Status.Autoscaling.WakeTime).To(BeNil())
	g.Expect(event()).To(And(HavePrefix("Normal ScaledToZero"), ContainSubstring("when records arrive")))

	at(20 * time.Minute)
	f.Produce(source, 1, 1)
	g.Expect(idleNow()).To(BeFalse(), "a source record is due")
	g.Expect(event()).To(And(HavePrefix("Normal Woke"), ContainSubstring("due lag 1")))
	g.Expect(event()).To(BeEmpty())
	g.Expect(strings.Contains(autoscalingMessage(p, render.AutoscalingOf(p, 2), p.Status.Autoscaling, ""), "at 0 pods after 2m0s with nothing due")).To(BeTrue())
}
