package controllers_test

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// maxSteadyRequests is what a steady resync may cost a connection, whatever its resources: one
// describe of their topics, one offsets round, one read of the groups' commits, one of the due
// offsets.
const maxSteadyRequests = 10

// steadyInterval is the resync interval of these runs; the fake clock moves it on.
const steadyInterval = time.Second

// TestSteadyResyncCostsAHandfulOfKafkaRequestsPerConnection: once settled, stepping the clock by an
// interval and letting every resource resync costs each connection at most maxSteadyRequests
// requests, and no Kubernetes write.
func TestSteadyResyncCostsAHandfulOfKafkaRequestsPerConnection(t *testing.T) {
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d connections", conns), func(t *testing.T) {
			r := startSteadyRun(t, 20, conns, steadyInterval)
			r.settle()
			before, reads := r.requestsSnapshot(), r.reads.snapshot()
			writes := r.writes.ok.Load() + r.writes.conflicts.Load()
			r.clk.Step(steadyInterval)
			r.awaitResyncs(reads, func() bool {
				for _, d := range r.since(before) {
					if d[kmsg.ListOffsets] == 0 {
						return false
					}
				}
				return true
			}, "every resource resynced and every connection read its offsets")
			for i, d := range r.since(before) {
				t.Logf("connection %d: %d requests in one resync (%s)", i, total(d), describeCounts(d))
				if total(d) > maxSteadyRequests {
					t.Errorf("connection %d: one steady resync of %d resources sent %d Kafka requests (%s), want at most %d",
						i, 2*r.n/conns, total(d), describeCounts(d), maxSteadyRequests)
				}
			}
			if n := r.writes.ok.Load() + r.writes.conflicts.Load() - writes; n != 0 {
				t.Errorf("a steady resync made %d Kubernetes writes, want 0", n)
			}
		})
	}
}

// TestAChangeToOneResourceCostsTheSameWhateverTheirNumber: changing one queue's retention, then
// letting everything resync, costs as many Kafka requests with 20 resources as with 200.
func TestAChangeToOneResourceCostsTheSameWhateverTheirNumber(t *testing.T) {
	cost := map[int]int64{}
	for _, n := range []int{10, 100} {
		t.Run(fmt.Sprintf("%d resources", 2*n), func(t *testing.T) {
			r := startSteadyRun(t, n, 1, steadyInterval)
			r.settle()
			adm := newKadm(t, r.clusters[0].ListenAddrs()...)
			q := &retryv1alpha1.DeadLetterQueue{}
			key := client.ObjectKey{Namespace: r.ns, Name: "dlq-001"}
			g := NewWithT(t)
			g.Expect(r.api.Get(r.ctx, key, q)).To(Succeed())
			before, reads := r.requestsSnapshot(), r.reads.snapshot()
			q.Spec.Retention = &retryv1alpha1.DeadLetterRetention{MaxAge: &metav1.Duration{Duration: time.Hour}}
			g.Expect(r.api.Update(r.ctx, q)).To(Succeed())
			r.awaitResyncs(reads, func() bool { return queueReadyAt(r, key, q.Generation) }, "the queue Ready at its new generation, and every resource resynced")
			d := r.since(before)[0]
			t.Logf("%d resources: the change cost %d Kafka requests (%s)", 2*n, total(d), describeCounts(d))
			// Read after the count: the test's own describes are not the operator's.
			g.Expect(describe(adm, string(q.Spec.Topic.Name))()).To(HaveField("Configs", HaveKeyWithValue("retention.ms", "3600000")))
			cost[n] = total(d)
		})
	}
	if cost[10] != cost[100] {
		t.Errorf("a change to one queue cost %d Kafka requests among 20 resources and %d among 200, want the same", cost[10], cost[100])
	}
}

// TestDriftOutOfBandIsRevertedWithinOneInterval: a topic config changed in Kafka behind the
// operator's back is set back once the clock moves on by an interval, at the cost of one steady
// resync and the alteration.
func TestDriftOutOfBandIsRevertedWithinOneInterval(t *testing.T) {
	r := startSteadyRun(t, 10, 1, steadyInterval)
	r.settle()
	g := NewWithT(t)
	adm := newKadm(t, r.clusters[0].ListenAddrs()...)
	topic := r.ns + ".dlq.003"
	_, err := adm.AlterTopicConfigs(r.ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "compression.type", Value: new("gzip")}}, topic)
	g.Expect(err).NotTo(HaveOccurred())
	before, reads := r.requestsSnapshot(), r.reads.snapshot()
	r.clk.Step(steadyInterval)
	// Watched through the requests counted, not by describing the topic: the test's describes
	// would be counted too.
	r.awaitResyncs(reads, func() bool { return r.since(before)[0][kmsg.IncrementalAlterConfigs] > 0 }, "a config set back, and every resource resynced")
	d := r.since(before)[0]
	t.Logf("one resync with a drift to revert: %d Kafka requests (%s)", total(d), describeCounts(d))
	g.Expect(describe(adm, topic)()).To(HaveField("Configs", HaveKeyWithValue("compression.type", "zstd")), "the drift reverted")
	g.Expect(d[kmsg.IncrementalAlterConfigs]).To(Equal(int64(1)), "one alteration")
	g.Expect(total(d)).To(BeNumerically("<=", maxSteadyRequests+1), describeCounts(d))
}

// queueReadyAt says the queue is Ready at generation gen.
func queueReadyAt(r *steadyRun, key client.ObjectKey, gen int64) bool {
	q := &retryv1alpha1.DeadLetterQueue{}
	if r.api.Get(r.ctx, key, q) != nil {
		return false
	}
	c := meta.FindStatusCondition(q.Status.Conditions, retryv1alpha1.ConditionReady)
	return q.Generation == gen && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == gen
}
