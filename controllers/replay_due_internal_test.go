package controllers

import (
	"context"
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
	"github.com/retryops/retry-operator/sdk/headers"
	sdkpolicy "github.com/retryops/retry-operator/sdk/policy"
)

// replayFixture is a pipeline with a 10-minute first tier on kafkafake, whose figures a test reads
// as the figures phase and the autoscaling step do, and the way a dead-letter action's run writes into
// that tier (the factory the action reconciler gives deadletters.Run).
type replayFixture struct {
	f      *kafkafake.Fake
	clk    *clocktesting.FakePassiveClock
	r      *ConsumerPipelineReconciler
	p      *retryv1alpha1.ConsumerPipeline
	conn   kafka.Connection
	rec    *events.FakeRecorder
	source string
	tier   string
	group  string
}

const replayTierDelay = 10 * time.Minute

func newReplayFixture(t *testing.T, start time.Time, auto *retryv1alpha1.PipelineAutoscaling) *replayFixture {
	x := &replayFixture{f: kafkafake.New(), clk: clocktesting.NewFakePassiveClock(start), rec: events.NewFakeRecorder(10),
		source: "orders", tier: "team.orders.retry.1", group: "team.orders",
		conn: kafka.Connection{BootstrapServers: []string{"fake:9092"}}}
	x.f.AddTopic(x.source, 2, 1, nil)
	x.f.AddTopic(x.tier, 2, 1, nil)
	x.r = &ConsumerPipelineReconciler{}
	x.r.Client = fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build()
	x.r.Recorder, x.r.Clock, x.r.RefreshInterval = x.rec, x.clk, time.Second
	x.r.Kafka = newKafkaAccessForTest(x.clk)
	x.p = &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "orders"},
		Spec: retryv1alpha1.ConsumerPipelineSpec{Source: retryv1alpha1.PipelineSource{Topic: retryv1alpha1.TopicName(x.source)}, DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: "dlq"},
			Autoscaling: auto}}
	return x
}

// step reconciles the live figures and the autoscaling decision at the clock's time, keeping the
// status between steps.
func (x *replayFixture) step(t *testing.T) replayStep {
	t.Helper()
	refs := pipelineRefs{tiers: dispatchercfg.Tiers{{Name: x.tier, Delay: sdkpolicy.D(replayTierDelay), Earliest: sdkpolicy.D(replayTierDelay), Latest: sdkpolicy.D(replayTierDelay)}}}
	topics := pipelineTopics{sourcePartitions: 2, retries: []retryv1alpha1.RetryTopicStatus{{Name: x.tier, Delay: metav1.Duration{Duration: replayTierDelay}, Partitions: 2}}}
	s := replayStep{live: x.r.figures(context.Background(), x.p, refs, topics, &kafkaClient{admin: x.f, conn: x.conn, connKey: x.conn.Key()})}
	if a := render.AutoscalingOf(x.p, 2); a != nil {
		s.autoscaling = &retryv1alpha1.PipelineAutoscalingStatus{}
		if prev := x.p.Status.Autoscaling; prev != nil {
			s.autoscaling = prev.DeepCopy()
		}
		x.r.decideIdle(context.Background(), x.p, s.autoscaling, a, s.live)
		x.p.Status.Autoscaling = s.autoscaling
	}
	x.p.Status.DueLag = s.live.dueLag
	return s
}

// replayStep is what a step found: the figures and the autoscaling status.
type replayStep struct {
	live        pipelineLive
	autoscaling *retryv1alpha1.PipelineAutoscalingStatus
}

// replay writes n replayed dead letters into the tier at the clock's time, as a Replay does:
// through the action's factory, with the headers headers.ReplayHeaders builds and the time of the
// produce as their timestamp.
func (x *replayFixture) replay(t *testing.T, partition int32, n int) {
	g := NewWithT(t)
	now := x.clk.Now()
	h := func(k, v string) headers.Header { return headers.Header{Key: k, Value: []byte(v)} }
	var recs []kafka.ProduceRecord
	for i := range n {
		dl := []headers.Header{h(headers.OriginalTopic, x.source), h(headers.OriginalPartition, "0"),
			h(headers.OriginalOffset, "7"), h(headers.OriginalTimestamp, headers.FormatTime(now.Add(-time.Hour))),
			h(headers.Attempts, "3"), h(headers.Reason, headers.ReasonMaxRetriesExceeded), h(headers.Pipeline, pipelineID(x.p))}
		built, err := headers.ReplayHeaders(dl, "team.dlq", 0, int64(i), now)
		g.Expect(err).NotTo(HaveOccurred())
		rec := kafka.ProduceRecord{Partition: partition, Timestamp: now, Value: []byte("v")}
		for _, b := range built {
			rec.Headers = append(rec.Headers, kafka.Header{Key: b.Key, Value: b.Value})
		}
		recs = append(recs, rec)
	}
	_, err := x.r.Kafka.replayFactory(x.f, nil).ProduceRecords(context.Background(), x.conn, x.tier, recs)
	g.Expect(err).NotTo(HaveOccurred())
}

// retry writes a dispatcher's retry record into the tier at the clock's time, due after the delay.
func (x *replayFixture) retry(t *testing.T, partition int32) {
	now := x.clk.Now()
	_, err := x.f.ProduceRecords(context.Background(), x.conn, x.tier, []kafka.ProduceRecord{{Partition: partition, Timestamp: now,
		Headers: []kafka.Header{{Key: headers.Due, Value: []byte(headers.FormatTime(now.Add(replayTierDelay)))}}}})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
}

// A Replay writes records due at once into a 10-minute tier: they count in status.dueLag as soon as
// the figures are read again, even behind a retry still waiting on the same partition, with
// minReplicas 1 (so that an autoscaler scales up for them); once the group read them they no longer
// count, and a retry the dispatcher wrote counts only when it is due.
func TestPipelineDueLagCountsReplayedRecordsAtOnce(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	x := newReplayFixture(t, start, &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](1), MaxReplicas: 3})
	x.retry(t, 0) // offset 0 of partition 0, due at 10m
	g.Expect(*x.step(t).live.dueLag).To(BeZero())

	x.clk.SetTime(start.Add(time.Minute))
	x.replay(t, 0, 4) // offsets 1..4, behind the waiting retry
	x.replay(t, 1, 3) // offsets 0..2
	x.clk.SetTime(start.Add(time.Minute + 2*time.Second))
	g.Expect(*x.step(t).live.dueLag).To(Equal(int64(7)), "the 7 replayed records are due when written; the retry waits")

	// The group read partition 1 and the replayed records of partition 0 (the retry still waits in
	// its look-ahead, so the commit stays at 0).
	x.f.Commit(x.group, x.tier, 1, 3)
	x.clk.SetTime(start.Add(2 * time.Minute))
	g.Expect(*x.step(t).live.dueLag).To(Equal(int64(4)), "partition 0's are still to read")
	x.f.Commit(x.group, x.tier, 0, 5)
	x.clk.SetTime(start.Add(3 * time.Minute))
	g.Expect(*x.step(t).live.dueLag).To(BeZero(), "all read")

	x.retry(t, 1) // a retry behind the read replays: due at 13m
	x.clk.SetTime(start.Add(4 * time.Minute))
	g.Expect(*x.step(t).live.dueLag).To(BeZero(), "a retry is not due when written")
	x.clk.SetTime(start.Add(13 * time.Minute))
	g.Expect(*x.step(t).live.dueLag).To(Equal(int64(1)), "the retry due")
}

// A pipeline idle at zero pods with nothing waiting wakes at the next refresh after a Replay wrote
// into its 10-minute first tier, not 10 minutes (less the wake lead) later.
func TestPipelineAtZeroWakesForAReplayAtOnce(t *testing.T) {
	g := NewWithT(t)
	start := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	const window, lead = 2 * time.Minute, 30 * time.Second
	x := newReplayFixture(t, start, &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 3,
		ScaleDownStabilization: &metav1.Duration{Duration: window}, WakeLead: &metav1.Duration{Duration: lead}})
	x.step(t)
	x.clk.SetTime(start.Add(window))
	x.step(t)
	g.Expect(x.p.Status.Autoscaling.IsIdle()).To(BeTrue(), "nothing due for the window")
	g.Expect(x.p.Status.Autoscaling.WakeTime).To(BeNil())

	x.clk.SetTime(start.Add(5 * time.Minute))
	x.replay(t, 0, 2)
	x.clk.SetTime(start.Add(5*time.Minute + time.Second))
	x.step(t)
	st := x.p.Status.Autoscaling
	g.Expect(st.IsIdle()).To(BeFalse(), "woken for the replayed records (wake time %v)", st.WakeTime)
	g.Expect(*x.p.Status.DueLag).To(Equal(int64(2)))
	g.Expect(st.WakeTime).NotTo(BeNil())
	g.Expect(st.WakeTime.Time).NotTo(BeTemporally(">", x.clk.Now()), "the earliest due time is now")
}

// newKafkaAccessForTest is the Kafka access of the live figures, on clk.
func newKafkaAccessForTest(clk *clocktesting.FakePassiveClock) *kafkaAccess {
	return &kafkaAccess{Offsets: kafkastats.NewOffsets(clk), Commits: kafkastats.NewCommits(clk), Due: kafkastats.NewDueOffsets(clk),
		Replayed: &kafkastats.Replayed{}}
}
