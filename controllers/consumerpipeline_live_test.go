package controllers_test

import (
	"context"
	"math"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// pipelineFigures is what a test compares of a pipeline's live status.
type pipelineFigures struct {
	ConsumerLag, RetryBacklog, DeadLetterMessages *int64
	TierBacklog                                   []int64
}

func pipelineFiguresOf(p *retryv1alpha1.ConsumerPipeline) func() (pipelineFigures, error) {
	return func() (pipelineFigures, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return pipelineFigures{}, err
		}
		f := pipelineFigures{ConsumerLag: p.Status.ConsumerLag, RetryBacklog: p.Status.RetryBacklog, DeadLetterMessages: p.Status.DeadLetterMessages}
		if p.Status.Topics != nil {
			for _, r := range p.Status.Topics.Retries {
				f.TierBacklog = append(f.TierBacklog, r.Backlog)
			}
		}
		return f, nil
	}
}

// commitOffsets commits offsets for group as a consumer would (topic -> partition -> offset).
func commitOffsets(t *testing.T, adm *testKafka, group string, offs map[string]map[int32]int64) {
	t.Helper()
	os := make(kadm.Offsets)
	for topic, ps := range offs {
		for p, at := range ps {
			os.Add(kadm.Offset{Topic: topic, Partition: p, At: at, LeaderEpoch: -1})
		}
	}
	if err := adm.CommitAllOffsets(context.Background(), group, os); err != nil {
		t.Fatalf("commit %s: %v", group, err)
	}
}

// kadmLag is kadm's own lag of group, by topic.
func kadmLag(t *testing.T, adm *testKafka, group string) map[string]int64 {
	t.Helper()
	lags, err := adm.Lag(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := lags[group]
	if !ok || l.Error() != nil {
		t.Fatalf("kadm lag of %s: %v", group, l.Error())
	}
	out := map[string]int64{}
	for topic, tl := range l.Lag.TotalByTopic() {
		out[topic] = tl.Lag
	}
	return out
}

// TestPipelineLiveStatus: a pipeline whose consumer group committed shows the lag on its source and
// the backlog of each retry tier as kadm computes them, the dead letters from it that its queue
// holds (as the queue's status counts them, and summed on its RetryPolicy), the figures in the
// columns of `kubectl get cpl`, and gauges equal to its status; the figures follow new commits, and
// a deleted pipeline's series go.
func TestPipelineLiveStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	dlq := newDLQ(ns, "dlq", ns+".dlq")
	dlq.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxGrowthPerMinute: ptr.To[int32](math.MaxInt32)}
	g.Expect(env.Client.Create(ctx, dlq)).To(Succeed())
	// Three attempts: two retry tiers, <source>.retry.1 and <source>.retry.2.
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "policy", 3, time.Second, time.Minute))).To(Succeed())
	source := ns + ".orders"
	createTopic(t, adm, source, 3)
	p := newPipeline(ns, "orders", source, "policy", "dlq")
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	tier1, tier2 := source+".retry.1", source+".retry.2"
	g.Expect(tiersOf(p)).To(HaveLen(2))
	g.Expect(p.Status.Topics.Retries[0].Name).To(Equal(tier1))
	g.Eventually(dlqReady(dlq), wait, poll).Should(isReady())

	// Nothing produced, nothing committed: all zero.
	g.Eventually(pipelineFiguresOf(p), oneResync, poll).Should(Equal(pipelineFigures{
		ConsumerLag: ptr.To[int64](0), RetryBacklog: ptr.To[int64](0), DeadLetterMessages: ptr.To[int64](0), TierBacklog: []int64{0, 0},
	}))

	produce(t, broker.ListenAddrs(), source, map[int32]int{0: 10, 1: 6, 2: 4})
	produce(t, broker.ListenAddrs(), tier1, map[int32]int{0: 5, 1: 3})
	produce(t, broker.ListenAddrs(), tier2, map[int32]int{2: 2})
	group := ns + ".orders"
	// Partition 2 of the source and partition 1 of tier 1 never committed; tier 2 not at all.
	commitOffsets(t, adm, group, map[string]map[int32]int64{source: {0: 4, 1: 6}, tier1: {0: 2}})
	want := kadmLag(t, adm, group)
	t.Logf("kadm's lag of %s by topic: %v", group, want)
	g.Expect(want).To(Equal(map[string]int64{source: 10, tier1: 6}))
	g.Expect(want).NotTo(HaveKey(tier2), "kadm knows nothing of a topic the group never committed to")
	g.Eventually(pipelineFiguresOf(p), oneResync, poll).Should(Equal(pipelineFigures{
		ConsumerLag: ptr.To(want[source]), RetryBacklog: ptr.To(want[tier1] + 2), DeadLetterMessages: ptr.To[int64](0),
		TierBacklog: []int64{want[tier1], 2}, // the whole of tier 2 is waiting
	}))

	// Dead letters from this pipeline and another one: the pipeline counts its own, as its queue does.
	var dls []*deadLetter
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for i := range 6 {
		from := ns + "/orders"
		if i >= 4 {
			from = ns + "/other"
		}
		dls = append(dls, &deadLetter{partition: int32(i % 3), reason: "max_retries_exceeded", errType: "TimeoutError", pipeline: from, at: at})
	}
	produceDeadLetters(t, broker.ListenAddrs(), ns+".dlq", dls)
	g.Eventually(func() ([]retryv1alpha1.NamedCount, error) { f, err := dlqFigures(dlq)(); return f.pipelines, err }, oneResync, poll).
		Should(Equal([]retryv1alpha1.NamedCount{{Name: ns + "/orders", Count: 4}, {Name: ns + "/other", Count: 2}}))
	g.Eventually(pipelineFiguresOf(p), oneResync, poll).Should(HaveField("DeadLetterMessages", Equal(ptr.To[int64](4))))
	rp := &retryv1alpha1.RetryPolicy{}
	g.Eventually(func() (*int64, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "policy"}, rp)
		return rp.Status.DeadLetterMessages, err
	}, wait, poll).Should(Equal(ptr.To[int64](4)), "the policy sums the dead letters of its pipelines")

	// Real kubectl shows the figures in their columns.
	out, err := env.Kubectl(nil, "get", "cpl", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubectl get cpl:\n%s", out)
	g.Expect(kubectlTable(g, out, "NAME", "SOURCE", "POLICY", "DLQ", "READY PODS", "LAG", "RETRYING", "DLQ MSGS", "READY", "AGE")).To(ConsistOf(And(
		HaveKeyWithValue("NAME", "orders"), HaveKeyWithValue("LAG", "10"), HaveKeyWithValue("RETRYING", "8"), HaveKeyWithValue("DLQ MSGS", "4"))))
	out, err = env.Kubectl(nil, "get", "dlq", "-n", ns)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kubectlTable(g, out, "NAME", "TOPIC", "MESSAGES", "PENDING", "OLDEST", "READY", "AGE")).To(ConsistOf(And(
		HaveKeyWithValue("MESSAGES", "6"), HaveKeyWithValue("PENDING", "6"))))

	// The gauges are the status figures, for the pipeline, its queue and its policy.
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(dlq), dlq)).To(Succeed())
	m := scrapeMetrics(t)
	pl := map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelConsumerPipeline: p.Name}
	g.Expect(m.value(opmetrics.ConsumerPipelineConsumerLag, pl)).To(Equal(float64(*p.Status.ConsumerLag)))
	g.Expect(m.value(opmetrics.ConsumerPipelineRetryBacklog, pl)).To(Equal(float64(*p.Status.RetryBacklog)))
	g.Expect(m.value(opmetrics.ConsumerPipelineDeadLetterMessages, pl)).To(Equal(float64(*p.Status.DeadLetterMessages)))
	if p.Status.ReadyReplicas != nil {
		g.Expect(m.value(opmetrics.ConsumerPipelineReadyReplicas, pl)).To(Equal(float64(*p.Status.ReadyReplicas)))
	} else {
		g.Expect(m.series(opmetrics.ConsumerPipelineReadyReplicas, pl)).To(BeZero())
	}
	ql := map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelDeadLetterQueue: dlq.Name}
	g.Expect(m.value(opmetrics.DeadLetterQueueMessages, ql)).To(Equal(float64(*dlq.Status.Messages)))
	g.Expect(m.value(opmetrics.DeadLetterQueueMessagesByReason, with(ql, opmetrics.LabelReason, "max_retries_exceeded"))).To(Equal(float64(6)))
	g.Expect(m.value(opmetrics.RetryPolicyDeadLetterMessages, map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelRetryPolicy: "policy"})).
		To(Equal(float64(*rp.Status.DeadLetterMessages)))

	// The group catches up: lag and backlog fall within a refresh. The policy, which watches its
	// pipelines, is not written: its figure did not change.
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "policy"}, rp)).To(Succeed())
	policyVersion := rp.ResourceVersion
	commitOffsets(t, adm, group, map[string]map[int32]int64{source: {0: 10, 1: 6, 2: 4}, tier1: {0: 5, 1: 3}, tier2: {2: 2}})
	g.Eventually(pipelineFiguresOf(p), oneResync, poll).Should(Equal(pipelineFigures{
		ConsumerLag: ptr.To[int64](0), RetryBacklog: ptr.To[int64](0), DeadLetterMessages: ptr.To[int64](4), TierBacklog: []int64{0, 0},
	}))
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "policy"}, rp)).To(Succeed())
	g.Expect(rp.ResourceVersion).To(Equal(policyVersion), "a pipeline change that leaves the policy's figures alone does not write the policy")

	// A deleted pipeline's series go; the policy's count follows.
	g.Expect(env.Client.Delete(ctx, p)).To(Succeed())
	g.Eventually(gone(p), wait, poll).Should(BeTrue())
	g.Eventually(func() int { return scrapeMetrics(t).series(opmetrics.ConsumerPipelineConsumerLag, pl) }, wait, poll).Should(BeZero())
	g.Eventually(func() (*int64, error) {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "policy"}, rp)
		return rp.Status.DeadLetterMessages, err
	}, wait, poll).Should(Equal(ptr.To[int64](0)))
	g.Expect(scrapeMetrics(t).value(opmetrics.RetryPolicyDeadLetterMessages, map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelRetryPolicy: "policy"})).To(BeZero())
}
