package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestFanOut: three pipelines consume one source, each with its own consumer group, policy, sink
// and tiers; billing and shipping share a dead letter queue, analytics has its own. 3,000 records,
// each with a fate chosen per sink: every pipeline gives every record exactly the deliveries and
// the dead letter its own sink and policy call for, no sink sees a record from another pipeline's
// tier or a replay of another pipeline's dead letter, and each queue's counts by pipeline equal a
// scan of its topic. Then `kubectl dlq replay --pipeline billing` on the shared queue reaches
// billing's sink only, and the replayed records meet their fate again.
func TestFanOut(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sinks, urls := map[string]*fanSink{}, map[string]string{}
	for _, p := range fanPipes {
		sinks[p.name] = &fanSink{p: p, calls: map[string][]fanCall{}}
		urls[p.name] = "http://" + serveSink(t, sinks[p.name]).Addr().String() + "/" + p.name
	}
	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	c := stack.Env.Client
	out, err := stack.Kubectl([]byte(fanManifests(urls)), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)

	pipes := map[string]*retryv1alpha1.ConsumerPipeline{}
	for _, p := range fanPipes {
		cp := &retryv1alpha1.ConsumerPipeline{}
		g.Eventually(func() error {
			if err := c.Get(ctx, client.ObjectKey{Namespace: fanNS, Name: p.name}, cp); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(cp.Status.Conditions, retryv1alpha1.ConditionReady) || cp.Status.Topics == nil ||
				len(cp.Status.Topics.Retries) == 0 || cp.Status.ReadyReplicas == nil || *cp.Status.ReadyReplicas < 1 {
				return fmt.Errorf("%s not running yet: %+v", p.name, cp.Status.Conditions)
			}
			return nil
		}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
		pipes[p.name] = cp
	}
	tiers := map[string][]string{}
	owner := map[string]string{} // tier -> pipeline
	for _, p := range fanPipes {
		for _, r := range pipes[p.name].Status.Topics.Retries {
			g.Expect(r.Name).To(HavePrefix(fanNS+"."+p.name+".retry."), "tiers are named after the pipeline")
			g.Expect(owner).NotTo(HaveKey(r.Name), "no two pipelines share a tier")
			owner[r.Name] = p.name
			tiers[p.name] = append(tiers[p.name], r.Name)
		}
		g.Expect(pipes[p.name].Status.ConsumerGroup).To(Equal(p.group))
		t.Logf("%s: group %s, tiers %v, queue %s", p.name, p.group, tiers[p.name], p.queue)
	}
	g.Expect(tiers["shipping"]).To(HaveLen(1), "ByDelay with equal delays: one tier")

	start := time.Now()
	g.Expect(produceFan(ctx, stack)).To(Succeed())

	// The expected fates, per pipeline.
	wantOK := map[string]int{}
	wantDead := map[string]map[string]string{} // pipeline -> key -> reason
	for _, p := range fanPipes {
		wantDead[p.qualified()] = map[string]string{}
		for n := range fanRecords {
			if _, reason := p.outcome(fanFate(p.index, n)); reason != "" {
				wantDead[p.qualified()][fanKey(n)] = reason
			} else {
				wantOK[p.name]++
			}
		}
	}
	differ := fateTally(t)
	t.Logf("%d of %d records have different fates in different pipelines", differ, fanRecords)
	g.Expect(differ).To(BeNumerically(">", fanRecords/2))
	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	adm := kadm.NewClient(cl)
	scan := func(topic string) []fanDead {
		var out []fanDead
		for _, r := range readAll(t, adm, stack, topic) {
			out = append(out, fanDead{id: fmt.Sprintf("%s/%d/%d", topic, r.Partition, r.Offset), key: string(r.Key),
				pipeline: header(r, headers.Pipeline), reason: header(r, headers.Reason), replayOf: header(r, headers.ReplayOf),
				message: header(r, headers.ErrorMessage)})
		}
		return out
	}
	deadOf := func(replays bool) map[string]map[string]string {
		got := map[string]map[string]string{}
		for _, topic := range []string{fanSharedTopic, fanOwnTopic} {
			for _, d := range scan(topic) {
				if (d.replayOf != "") != replays {
					continue
				}
				if got[d.pipeline] == nil {
					got[d.pipeline] = map[string]string{}
				}
				g.Expect(got[d.pipeline]).NotTo(HaveKey(d.key), "dead-lettered twice by %s", d.pipeline)
				got[d.pipeline][d.key] = d.reason
			}
		}
		return got
	}
	for _, p := range fanPipes {
		g.Eventually(sinks[p.name].accepted, 3*time.Minute, 250*time.Millisecond).Should(Equal(wantOK[p.name]), p.name)
	}
	g.Eventually(func() map[string]map[string]string { return deadOf(false) }, 2*time.Minute, time.Second).Should(Equal(wantDead))
	t.Logf("%d records settled in 3 pipelines in %s", fanRecords, time.Since(start).Round(time.Millisecond))

	// Exactly the deliveries each fate calls for, all from the source or the pipeline's own tiers.
	for _, p := range fanPipes {
		calls := sinks[p.name].snapshot()
		g.Expect(sinks[p.name].strays).To(BeZero())
		g.Expect(calls).To(HaveLen(fanRecords), p.name)
		for n := range fanRecords {
			want, _ := p.outcome(fanFate(p.index, n))
			cs := calls[fanKey(n)]
			g.Expect(cs).To(HaveLen(want), "%s: deliveries of %s", p.name, fanKey(n))
			for i, call := range cs {
				g.Expect(call.attempt).To(Equal(i+1), "%s: %s", p.name, fanKey(n))
				g.Expect(call.replayOf).To(BeEmpty(), "%s: %s", p.name, fanKey(n))
				from := topicOf(call.from)
				if i == 0 {
					g.Expect(from).To(Equal(fanSource), "%s: %s", p.name, fanKey(n))
				} else {
					g.Expect(tiers[p.name]).To(ContainElement(from), "%s: %s delivered from another pipeline's tier", p.name, fanKey(n))
				}
			}
		}
		t.Logf("%s: %d requests, %d accepted, %d dead letters", p.name, sinks[p.name].requests(), wantOK[p.name], len(wantDead[p.qualified()]))
	}
	queueCounts(t, g, c, scan)
	// Each pipeline's status shows its own group's lag and its own tiers' backlog, both drained.
	for _, p := range fanPipes {
		cp := pipes[p.name]
		g.Eventually(func() ([2]int64, error) {
			err := c.Get(ctx, client.ObjectKeyFromObject(cp), cp)
			return [2]int64{ptr.Deref(cp.Status.ConsumerLag, -1), ptr.Deref(cp.Status.RetryBacklog, -1)}, err
		}, time.Minute, 250*time.Millisecond).Should(Equal([2]int64{0, 0}), p.name)
	}

	pluginFanReplay(t, g, stack, sinks, tiers, scan)
	queueCounts(t, g, c, scan)
	misrouted(t, g, cl, sinks, tiers, scan)
	queueCounts(t, g, c, scan)
	ownFigures(t, g, stack, cl, tiers)
	t.Logf("fan-out test took %s", time.Since(start).Round(time.Millisecond))
}

// produceFan writes the fanRecords records to the source.
func produceFan(ctx context.Context, stack *devenv.Stack) error {
	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rs := make([]*kgo.Record, 0, fanRecords)
	for n := range fanRecords {
		rs = append(rs, &kgo.Record{Topic: fanSource, Key: []byte(fanKey(n)), Value: fmt.Appendf(nil, `{"n":%d}`, n)})
	}
	return cl.ProduceSync(ctx, rs...).FirstErr()
}

// queueCounts waits until each queue's status counts by pipeline equal a scan of its topic.
func queueCounts(t *testing.T, g *WithT, c client.Client, scan func(string) []fanDead) {
	t.Helper()
	for _, q := range [][2]string{{fanShared, fanSharedTopic}, {fanOwn, fanOwnTopic}} {
		byPipeline := map[string]int64{}
		var total int64
		for _, d := range scan(q[1]) {
			byPipeline[d.pipeline]++
			total++
		}
		var want []retryv1alpha1.NamedCount
		for name, n := range byPipeline {
			want = append(want, retryv1alpha1.NamedCount{Name: name, Count: n})
		}
		dlq := &retryv1alpha1.DeadLetterQueue{}
		g.Eventually(func() ([]retryv1alpha1.NamedCount, error) {
			err := c.Get(context.Background(), client.ObjectKey{Namespace: fanNS, Name: q[0]}, dlq)
			return dlq.Status.Pipelines, err
		}, time.Minute, 250*time.Millisecond).Should(ConsistOf(want), q[0])
		g.Expect(dlq.Status.Messages).To(HaveValue(Equal(total)), q[0])
		t.Logf("queue %s: %d dead letters, by pipeline %v", q[0], total, dlq.Status.Pipelines)
	}
}

// pluginFanReplay replays billing's dead letters on the shared queue with the real plugin: each
// reaches billing's sink as attempt 1 of a replay, through billing's first tier, and fails again as
// its fate says (back in the queue naming its previous entry); shipping's and analytics' sinks get
// nothing more.
func pluginFanReplay(t *testing.T, g *WithT, stack *devenv.Stack, sinks map[string]*fanSink, tiers map[string][]string, scan func(string) []fanDead) {
	t.Helper()
	plugin := filepath.Join(t.TempDir(), "kubectl-dlq")
	build := exec.Command("go", "build", "-o", plugin, "./cmd/kubectl-dlq")
	build.Dir = envtestutil.RepoRoot()
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))

	billing := fanPipes[0]
	replayed := map[string]fanDead{} // dead letter id -> it
	for _, d := range scan(fanSharedTopic) {
		if d.pipeline == billing.qualified() {
			replayed[d.id] = d
		}
	}
	before := map[string]int{}
	for name, s := range sinks {
		before[name] = s.requests()
	}
	cmd := exec.Command(plugin, "--kubeconfig", stack.Kubeconfig, "-n", fanNS,
		"replay", fanShared, "--pipeline", billing.name, "--rate", "2000", "--wait")
	b, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(b))
	t.Logf("kubectl dlq replay --pipeline %s --wait:\n%s", billing.name, b)
	g.Expect(string(b)).To(And(ContainSubstring("Succeeded"), ContainSubstring(fmt.Sprintf("replayed: %d", len(replayed)))))

	// Every replay fails again, by its fate: back in the queue once each, naming its entry.
	g.Eventually(func() int {
		n := 0
		for _, d := range scan(fanSharedTopic) {
			if d.replayOf != "" {
				n++
			}
		}
		return n
	}, time.Minute, 500*time.Millisecond).Should(Equal(len(replayed)))
	for _, d := range scan(fanSharedTopic) {
		if d.replayOf == "" {
			continue
		}
		g.Expect(d.pipeline).To(Equal(billing.qualified()))
		was, ok := replayed[d.replayOf]
		g.Expect(ok).To(BeTrue(), "a replay of a dead letter not replayed: %s", d.replayOf)
		g.Expect(d.key).To(Equal(was.key))
		g.Expect(d.reason).To(Equal(was.reason), "the same fate again: %s", d.key)
	}

	// Billing's sink got each replay's run of deliveries, from its own first tier, then its tiers.
	calls := sinks[billing.name].snapshot()
	extra := 0
	for id, d := range replayed {
		var run []fanCall
		for _, call := range calls[d.key] {
			if call.replayOf == id {
				run = append(run, call)
			}
		}
		want, _ := billing.outcome(fanFate(billing.index, keyNumber(d.key)))
		g.Expect(run).To(HaveLen(want), "replay of %s (%s)", id, d.key)
		for i, call := range run {
			g.Expect(call.attempt).To(Equal(i + 1))
			g.Expect(tiers[billing.name]).To(ContainElement(topicOf(call.from)))
			if i == 0 {
				g.Expect(topicOf(call.from)).To(Equal(tiers[billing.name][0]), "a replay starts in the first tier")
			}
		}
		extra += want
	}
	g.Expect(sinks[billing.name].requests()).To(Equal(before[billing.name]+extra), "billing: nothing but the replays")
	for _, name := range []string{"shipping", "analytics"} {
		g.Expect(sinks[name].requests()).To(Equal(before[name]), "%s got nothing from billing's replay", name)
		for key, cs := range sinks[name].snapshot() {
			for _, call := range cs {
				g.Expect(call.replayOf).To(BeEmpty(), "%s: %s", name, key)
			}
		}
	}
	t.Logf("replay of %d billing dead letters: %d deliveries to billing, none to shipping or analytics", len(replayed), extra)
}

func keyNumber(key string) int {
	var n int
	_, _ = fmt.Sscanf(key, "f-%d", &n)
	return n
}

// misrouted writes to billing's first tier a retry record that claims shipping, with a well-formed
// billing record behind it: the first is dead-lettered malformed by billing, naming both
// pipelines, and reaches no sink; the second reaches billing's sink, from its tier, as attempt 2.
func misrouted(t *testing.T, g *WithT, cl *kgo.Client, sinks map[string]*fanSink, tiers map[string][]string, scan func(string) []fanDead) {
	t.Helper()
	before := map[string]int{}
	for name, s := range sinks {
		before[name] = s.requests()
	}
	now := time.Now()
	tierRecord := func(key, pipeline string, offset int) *kgo.Record {
		var hs []kgo.RecordHeader
		for _, kv := range [][2]string{
			{headers.OriginalTopic, fanSource}, {headers.OriginalPartition, "0"}, {headers.OriginalOffset, strconv.Itoa(offset)},
			{headers.OriginalTimestamp, headers.FormatTime(now)}, {headers.SourceTimestamp, headers.FormatTime(now)},
			{headers.Pipeline, pipeline}, {headers.Attempts, "1"},
			{headers.FirstFailure, headers.FormatTime(now)}, {headers.LastFailure, headers.FormatTime(now)},
			{headers.ErrorType, "HTTP500"}, {headers.ErrorMessage, "500"}, {headers.HTTPStatus, "500"},
			{headers.Rule, "server-errors"}, {headers.Due, headers.FormatTime(now)},
		} {
			hs = append(hs, kgo.RecordHeader{Key: kv[0], Value: []byte(kv[1])})
		}
		return &kgo.Record{Topic: tiers["billing"][0], Partition: 0, Key: []byte(key), Value: []byte(`{}`), Headers: hs}
	}
	const bad, behind = "f-11", "f-12"
	g.Expect(cl.ProduceSync(context.Background(),
		tierRecord(bad, fanNS+"/shipping", 1_000_011), tierRecord(behind, fanNS+"/billing", 1_000_012)).FirstErr()).To(Succeed())

	var dead *fanDead
	g.Eventually(func() *fanDead {
		for _, d := range scan(fanSharedTopic) {
			if d.key == bad && d.reason == headers.ReasonMalformed {
				dead = &d
			}
		}
		return dead
	}, time.Minute, 250*time.Millisecond).ShouldNot(BeNil())
	g.Expect(dead.pipeline).To(Equal(fanNS+"/billing"), "dead-lettered by the pipeline that read it")
	g.Expect(dead.message).To(And(ContainSubstring(fanNS+"/shipping"), ContainSubstring(fanNS+"/billing")))
	g.Eventually(func() []fanCall {
		var out []fanCall
		for _, c := range sinks["billing"].snapshot()[behind] {
			if topicOf(c.from) == tiers["billing"][0] && c.attempt == 2 {
				out = append(out, c)
			}
		}
		return out
	}, time.Minute, 250*time.Millisecond).Should(HaveLen(1), "the record behind is delivered")
	g.Expect(sinks["billing"].requests()).To(Equal(before["billing"]+1), "billing: only the record behind")
	for _, name := range []string{"shipping", "analytics"} {
		g.Expect(sinks[name].requests()).To(Equal(before[name]), name)
	}
	t.Logf("misrouted tier record dead-lettered: %s", dead.message)
}
