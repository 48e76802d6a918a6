package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	upNS     = "upgrade"
	upName   = "legacy"
	upSource = "up-tasks"
	upGroup  = "up-group"
	upDLQ    = "up-tasks.dlq"
	// upPerTier records wait in each of the first two old tiers, upFresh in the source.
	upPerTier = 60
	upFresh   = 30
)

// upOld are the tiers the release before fan-out named after the source, with their delays.
var upOld = []struct {
	name  string
	delay time.Duration
}{{upSource + ".retry.1", time.Second}, {upSource + ".retry.2", 2 * time.Second}, {upSource + ".retry.3", 4 * time.Second}}

func upManifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + upNS + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: up, namespace: ` + upNS + `}
spec:
  maxAttempts: 4
  backoff: {initialDelay: 1s, multiplier: "2", maxDelay: 30s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: up-dlq, namespace: ` + upNS + `}
spec:
  topic: {name: ` + upDLQ + `, partitions: 3}
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: ` + upName + `, namespace: ` + upNS + `}
spec:
  source: {topic: ` + upSource + `, consumerGroup: ` + upGroup + `, create: {partitions: 3}}
  retryTopics: {naming: ByAttempt, deletionPolicy: Delete}
  retryPolicyRef: {name: up}
  deadLetterQueueRef: {name: up-dlq}
  delivery: {ordering: Unordered, maxInFlight: 50}
  sink: {uri: "` + sinkURL + `"}
  replicas: 2
`
}

// upTierRecord is a record as the release before fan-out wrote it to a retry tier after delivery
// number attempts failed with a 503: its retry headers, no retryops.pipeline.
func upTierRecord(topic, key string, partition int32, offset, attempts int, due time.Time) *kgo.Record {
	now := time.Now()
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte(key), Value: []byte(`{"upgrade":true}`), Headers: []kgo.RecordHeader{
		h(headers.OriginalTopic, upSource), h(headers.OriginalPartition, strconv.Itoa(int(partition))),
		h(headers.OriginalOffset, strconv.Itoa(offset)), h(headers.OriginalTimestamp, headers.FormatTime(now)),
		h(headers.SourceTimestamp, headers.FormatTime(now)),
		h(headers.Attempts, strconv.Itoa(attempts)),
		h(headers.FirstFailure, headers.FormatTime(now)), h(headers.LastFailure, headers.FormatTime(now)),
		h(headers.ErrorType, "HTTP503"), h(headers.ErrorMessage, "test sink: try again later"),
		h(headers.HTTPStatus, "503"), h(headers.Rule, "transient-http"),
		h(headers.Due, headers.FormatTime(due)),
	}}
}

// TestUpgradeFromTiersNamedAfterTheSource: on the `make run` stack, a pipeline as the release
// before fan-out leaves it (tiers <source>.retry.<n> in its status and its ledger record, records
// waiting in two of them, the group's offsets on them, fresh records in the source) is taken over
// by this release's manager and dispatchers. Every waiting record is delivered (or dead-lettered as
// max_retries_exceeded) exactly once, the records the group had consumed are not delivered again,
// new retries go to the new tiers (<namespace>.<name>.retry.<n>) and name the pipeline, and the old
// tiers are deleted once drained (deletionPolicy Delete).
//
// The manager is stopped before the resources exist, so the state is built as the old release
// left it without the new manager reconciling a half-built pipeline; the dispatchers' runner keeps
// running (it runs whatever Deployment the new manager makes).
func TestUpgradeFromTiersNamedAfterTheSource(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &pcSink{}
	l := serveSink(t, sink)
	stack, _ := startStack(t, "retryops/retry-dispatcher:upgrade")
	start := time.Now()
	stack.Manager.Stop()
	c := stack.Env.Client

	out, err := stack.Kubectl([]byte(upManifests("http://"+l.Addr().String()+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	p := &retryv1alpha1.ConsumerPipeline{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: upNS, Name: upName}, p)).To(Succeed())

	// The old release's ledger record and status.
	var oldNames []string
	for _, o := range upOld {
		oldNames = append(oldNames, o.name)
	}
	ledger := &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: envtestutil.OperatorNamespace}
	g.Expect(ledger.Record(ctx, p, append([]string{upSource}, oldNames...)...)).To(Succeed())
	before := p.DeepCopy()
	p.Status.Topics = &retryv1alpha1.PipelineTopics{Source: upSource, SourcePartitions: 3, DeadLetter: upDLQ}
	for _, o := range upOld {
		p.Status.Topics.Retries = append(p.Status.Topics.Retries, retryv1alpha1.RetryTopicStatus{Name: o.name, Delay: metav1.Duration{Duration: o.delay}, Partitions: 3})
	}
	g.Expect(c.Status().Patch(ctx, p, client.MergeFrom(before))).To(Succeed())

	// Its topics: in each partition of the source and of the first two tiers, one record the group
	// consumed (done-*), then the waiting ones, due over the next seconds.
	kcl, err := kgo.NewClient(stack.KafkaOptions(kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer kcl.Close()
	adm := kadm.NewClient(kcl)
	created, err := adm.CreateTopics(ctx, 3, 1, nil, append([]string{upSource}, oldNames...)...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(created.Error()).NotTo(HaveOccurred())
	var recs []*kgo.Record
	committed := kadm.Offsets{}
	for _, topic := range append([]string{upSource}, oldNames[:2]...) {
		for part := range int32(3) {
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Key: fmt.Appendf(nil, "done-%s-%d", topic, part)})
			committed.Add(kadm.Offset{Topic: topic, Partition: part, At: 1, LeaderEpoch: -1})
		}
	}
	due := time.Now().Add(3 * time.Second)
	for i := range 2 * upPerTier {
		tier, attempts := oldNames[i/upPerTier], 1+i/upPerTier
		recs = append(recs, upTierRecord(tier, devKey(i), int32(i%3), i, attempts, due.Add(time.Duration(i%upPerTier)*100*time.Millisecond)))
	}
	for i := 2 * upPerTier; i < 2*upPerTier+upFresh; i++ {
		recs = append(recs, &kgo.Record{Topic: upSource, Partition: int32(i % 3), Key: []byte(devKey(i))})
	}
	g.Expect(kcl.ProduceSync(ctx, recs...).FirstErr()).To(Succeed())
	g.Expect(adm.CommitAllOffsets(ctx, upGroup, committed)).To(Succeed())

	dlqReader, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(upDLQ), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer dlqReader.Close()
	dead := &pcDeadLetters{cl: dlqReader, got: map[string][]map[string]string{}}

	t.Logf("the old release's state built in %s; starting this release's manager", time.Since(start).Round(time.Millisecond))
	g.Expect(stack.RestartManager()).To(Succeed())
	start = time.Now()

	// Every record ends delivered or dead-lettered: all but the pcNever ones are delivered (pcFour
	// at attempt 4, through the new tiers), the pcNever ones dead-lettered at attempt 4.
	wantDelivered, wantDead := map[string]bool{}, map[string]bool{}
	for i := range 2*upPerTier + upFresh {
		if pcClass(i) == pcNever {
			wantDead[devKey(i)] = true
		} else {
			wantDelivered[devKey(i)] = true
		}
	}
	g.Eventually(func(g Gomega) {
		g.Expect(slices.Sorted(maps.Keys(sink.delivered()))).To(Equal(slices.Sorted(maps.Keys(wantDelivered))))
		g.Expect(slices.Sorted(maps.Keys(dead.poll(ctx)))).To(Equal(slices.Sorted(maps.Keys(wantDead))))
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("every record delivered or dead-lettered %s after the new manager started", time.Since(start).Round(time.Millisecond))

	// The old tiers go once drained; the status and the ledger name the new ones only.
	base := upNS + "." + upName
	newNames := []string{base + ".retry.1", base + ".retry.2", base + ".retry.3"}
	g.Eventually(func(g Gomega) {
		td, err := adm.ListTopics(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(td.Has(oldNames[0]) || td.Has(oldNames[1]) || td.Has(oldNames[2])).To(BeFalse(), "old tiers left: %v", td.Names())
		g.Expect(td.Has(upSource)).To(BeTrue(), "the source is kept")
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, retryv1alpha1.ConditionReady)).To(BeTrue())
		var tiers []string
		for _, r := range p.Status.Topics.Retries {
			tiers = append(tiers, r.Name)
		}
		g.Expect(tiers).To(Equal(newNames))
		g.Expect(p.Status.Topics.DrainingRetries).To(BeEmpty())
	}, 2*time.Minute, 250*time.Millisecond).Should(Succeed())
	fresh := &kafkaspec.Ledger{Reader: c, Writer: c, Namespace: envtestutil.OperatorNamespace}
	g.Expect(fresh.Topics(ctx, p)).To(Equal(append([]string{upSource}, newNames...)))
	t.Logf("old tiers deleted, %s after the new manager started", time.Since(start).Round(time.Millisecond))

	// Exactly once: each key's deliveries are attempts in a row from the one its record was due
	// for, the first one from where it waited and every later one from a new tier; nothing the
	// group had consumed is delivered again.
	for i := range 2*upPerTier + upFresh {
		key := devKey(i)
		first := 1 + (i/upPerTier + 1)
		if i >= 2*upPerTier {
			first = 1
		}
		var got []int
		oks := 0
		for j, a := range sink.attempts(key) {
			got = append(got, a.attempt)
			if a.ok {
				oks++
			}
			switch topic := strings.SplitN(a.from, "/", 2)[0]; {
			case j > 0:
				g.Expect(newNames).To(ContainElement(topic), "%s: retry %d delivered from %s", key, a.attempt, a.from)
			case i < 2*upPerTier:
				g.Expect(topic).To(Equal(oldNames[i/upPerTier]), "%s: where it waited", key)
			}
		}
		last, wantOK := 4, 1 // pcFour succeeds at attempt 4; pcNever fails it
		switch pcClass(i) {
		case pcOK:
			last = first
		case pcTwo:
			last = max(first, 2)
		case pcNever:
			wantOK = 0
		}
		var want []int
		for a := first; a <= last; a++ {
			want = append(want, a)
		}
		g.Expect(got).To(Equal(want), "%s: the attempts delivered", key)
		g.Expect(oks).To(Equal(wantOK), "%s: successful deliveries", key)
	}
	for _, key := range slices.Sorted(maps.Keys(sink.delivered())) {
		g.Expect(key).NotTo(HavePrefix("done-"), "a record the group had consumed was delivered again")
	}
	for key, letters := range dead.poll(ctx) {
		g.Expect(letters).To(HaveLen(1), "%s dead-lettered more than once", key)
		g.Expect(letters[0][headers.Reason]).To(Equal(headers.ReasonMaxRetriesExceeded))
		g.Expect(letters[0][headers.Pipeline]).To(Equal(upNS + "/" + upName))
	}

	// The new tiers' records name their pipeline.
	tierReader, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics(newNames...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer tierReader.Close()
	ends, err := adm.ListEndOffsets(ctx, newNames...)
	g.Expect(err).NotTo(HaveOccurred())
	var inTiers int64
	ends.Each(func(o kadm.ListedOffset) { inTiers += o.Offset })
	g.Expect(inTiers).To(BeNumerically(">", 0), "no retry went to the new tiers")
	var read int64
	for read < inTiers {
		fetches := tierReader.PollFetches(ctx)
		g.Expect(fetches.Err()).NotTo(HaveOccurred())
		fetches.EachRecord(func(r *kgo.Record) {
			read++
			var pipeline string
			for _, h := range r.Headers {
				if h.Key == headers.Pipeline {
					pipeline = string(h.Value)
				}
			}
			g.Expect(pipeline).To(Equal(upNS+"/"+upName), "record %s in %s", r.Key, r.Topic)
		})
	}
	t.Logf("%d retries in the new tiers, each naming its pipeline", inTiers)
}

func devKey(i int) string { return "demo-" + strconv.Itoa(i) }
