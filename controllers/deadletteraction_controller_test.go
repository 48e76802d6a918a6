package controllers_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
)

// actionDeadLetter is one dead letter a test writes, as the dispatcher would.
type actionDeadLetter struct {
	partition         int32
	reason, errorType string
}

// writeDeadLetters produces dls to the queue's topic with the dispatcher's context headers, naming
// pipeline (<namespace>/<name>) and original coordinates on source.
func writeDeadLetters(t *testing.T, topic, source, pipeline string, dls []actionDeadLetter) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i, dl := range dls {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: dl.partition, Key: []byte("k" + strconv.Itoa(i)), Value: []byte(`{"n":` + strconv.Itoa(i) + `}`),
			Headers: []kgo.RecordHeader{
				{Key: "trace", Value: []byte("t" + strconv.Itoa(i))},
				{Key: headers.OriginalTopic, Value: []byte(source)},
				{Key: headers.OriginalPartition, Value: []byte("0")},
				{Key: headers.OriginalOffset, Value: []byte(strconv.Itoa(i))},
				{Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(time.Now()))},
				{Key: headers.Reason, Value: []byte(dl.reason)},
				{Key: headers.ErrorType, Value: []byte(dl.errorType)},
				{Key: headers.Pipeline, Value: []byte(pipeline)},
				{Key: headers.Attempts, Value: []byte("3")},
			}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// newAction returns an action on queue.
func newAction(ns, name, queue string, action retryv1alpha1.DeadLetterActionType, sel *retryv1alpha1.DeadLetterSelector) *retryv1alpha1.DeadLetterAction {
	return &retryv1alpha1.DeadLetterAction{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       retryv1alpha1.DeadLetterActionSpec{Queue: queue, Action: action, Selector: sel, RequestedBy: "alice"},
	}
}

// actionPhase reads the action and returns its phase.
func actionPhase(a *retryv1alpha1.DeadLetterAction) func() (retryv1alpha1.DeadLetterActionPhase, error) {
	return func() (retryv1alpha1.DeadLetterActionPhase, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), a)
		return a.Status.Phase, err
	}
}

// actionReady reads the action and returns its Ready condition.
func actionReady(a *retryv1alpha1.DeadLetterAction) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(a), a)
		return meta.FindStatusCondition(a.Status.Conditions, retryv1alpha1.ConditionReady), err
	}
}

// replays reads the records of topic, which hold the replays, and returns their replay.of headers.
func replays(t *testing.T, adm *testKafka, topic string) []string {
	t.Helper()
	var out []string
	for _, r := range consumeAll(t, adm, topic) {
		for _, h := range r.Headers {
			if h.Key == headers.ReplayOf {
				out = append(out, string(h.Value))
			}
		}
	}
	return out
}

// The lifecycle of actions on one queue: a dry run counts and changes nothing; a Replay of one
// reason and one error type replays exactly those, through the pipeline's first retry topic, and
// records them Replayed; actions on one queue wait for each other; Resolve records its note; Purge
// deletes the decided prefix of each partition and reports the pending dead letter that blocks; a
// missing queue is reported.
func TestDeadLetterActions(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	q := newDLQ(ns, "dlq", ns+".dlq")
	q.Spec.Topic.Partitions = 2
	g.Expect(env.Client.Create(ctx, q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())
	p := newPipeline(ns, "orders", ns+".orders", "chatbot", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(func() (int, error) { _, err := pipelineReady(p)(); return len(tiersOf(p)), err }, wait, poll).Should(BeNumerically(">", 0))
	tier1 := tiersOf(p)[0].Name

	// 40 dead letters over two partitions; every 7th of partition 0 is undeliverable (never
	// decided below, so it blocks the purge of its partition).
	var dls []actionDeadLetter
	want := map[string]bool{}
	offsets := map[int32]int{}
	for i := range 40 {
		dl := actionDeadLetter{partition: int32(i % 2), reason: headers.ReasonMaxRetriesExceeded, errorType: "HTTP500"}
		switch {
		case i%2 == 0 && i%7 == 3:
			dl.reason, dl.errorType = headers.ReasonUndeliverable, "Undeliverable"
		case i%3 == 1:
			dl.reason = headers.ReasonNonRetriable
		case i%5 == 2:
			dl.errorType = "HTTP503"
		}
		if dl.reason == headers.ReasonMaxRetriesExceeded && dl.errorType == "HTTP500" {
			want[fmt.Sprintf("%s/%d/%d", q.Spec.Topic.Name, dl.partition, offsets[dl.partition])] = true
		}
		offsets[dl.partition]++
		dls = append(dls, dl)
	}
	writeDeadLetters(t, string(q.Spec.Topic.Name), ns+".orders", ns+"/orders", dls)
	selectReplay := &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{headers.ReasonMaxRetriesExceeded}, ErrorTypes: []retryv1alpha1.DeadLetterName{"HTTP500"}}

	// A dry run matches them and changes nothing.
	dry := newAction(ns, "dry", "dlq", retryv1alpha1.DeadLetterReplay, selectReplay)
	dry.Spec.Mode = retryv1alpha1.ActionModeDryRun
	g.Expect(env.Client.Create(ctx, dry)).To(Succeed())
	g.Eventually(actionPhase(dry), wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(dry.Status.Matched).To(Equal(int64(len(want))))
	g.Expect(dry.Status.MatchedRecords).To(HaveLen(len(want)))
	g.Expect(held(adm, tier1)()).To(BeZero(), "a dry run produces nothing")

	// The replay, and a Resolve created while it runs, which waits for it.
	replay := newAction(ns, "replay", "dlq", retryv1alpha1.DeadLetterReplay, selectReplay)
	replay.Spec.Rate = &retryv1alpha1.ReplayRate{RecordsPerSecond: 5}
	g.Expect(env.Client.Create(ctx, replay)).To(Succeed())
	g.Eventually(actionPhase(replay), wait, poll).Should(Equal(retryv1alpha1.ActionRunning))
	resolve := newAction(ns, "resolve", "dlq", retryv1alpha1.DeadLetterResolve, &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable}})
	resolve.Spec.Note = "fixed upstream"
	g.Expect(env.Client.Create(ctx, resolve)).To(Succeed())
	g.Eventually(actionReady(resolve), wait, poll).Should(And(Not(BeNil()), HaveField("Reason", "WaitingForAction"), HaveField("Message", ContainSubstring("replay"))))
	g.Expect(replay.Status.Phase).NotTo(Equal(retryv1alpha1.ActionSucceeded))

	g.Eventually(actionPhase(replay), 2*wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(replay.Status.Matched).To(Equal(int64(len(want))))
	g.Expect(replay.Status.Done).To(Equal(int64(len(want))))
	g.Expect(replay.Status.Progress).To(Equal(fmt.Sprintf("%d/%d", len(want), len(want))))
	got := replays(t, adm, tier1)
	g.Expect(got).To(HaveLen(len(want)))
	for _, of := range got {
		g.Expect(want).To(HaveKey(of))
	}
	g.Expect(held(adm, string(p.Spec.Source.Topic))()).To(BeZero(), "never the shared source topic")
	g.Expect(eventsFor(ns, "replay")()).To(ContainElement(And(HaveField("Type", corev1.EventTypeNormal), HaveField("Reason", "Succeeded"))))

	// The Resolve runs next: the pending ones of its reasons (the replayed are not Pending).
	g.Eventually(actionPhase(resolve), wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(resolve.Status.Done).To(Equal(int64(40 - len(want) - 3)))
	// The queue counts its dead letters by state from the record of decisions.
	g.Eventually(func() ([]retryv1alpha1.NamedCount, error) {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(q), q)
		return q.Status.States, err
	}, wait, poll).Should(Equal([]retryv1alpha1.NamedCount{{Name: "Pending", Count: 3}, {Name: "Replayed", Count: int64(len(want))},
		{Name: "Resolved", Count: int64(40 - len(want) - 3)}, {Name: "Ignored", Count: 0}}))
	g.Expect(q.Status.Pending).To(Equal(ptr.To(int64(3))))
	g.Expect(q.Status.OldestPendingTime).NotTo(BeNil())

	// Purge: partition 1 holds only decided dead letters and goes whole; partition 0 stops at its
	// first undeliverable one, still Pending.
	purge := newAction(ns, "purge", "dlq", retryv1alpha1.DeadLetterPurge, &retryv1alpha1.DeadLetterSelector{
		Before: &metav1.Time{Time: time.Now().Add(time.Hour)}})
	g.Expect(env.Client.Create(ctx, purge)).To(Succeed())
	g.Eventually(actionPhase(purge), wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(purge.Status.BlockingRecords).To(ConsistOf(retryv1alpha1.RecordRef(fmt.Sprintf("0/%d", firstUndeliverable(dls)))))
	starts, err := adm.ListStartOffsets(ctx, string(q.Spec.Topic.Name))
	g.Expect(err).NotTo(HaveOccurred())
	s0, _ := starts.Lookup(string(q.Spec.Topic.Name), 0)
	s1, _ := starts.Lookup(string(q.Spec.Topic.Name), 1)
	g.Expect([]int64{s0.Offset, s1.Offset}).To(Equal([]int64{int64(firstUndeliverable(dls)), 20}))

	// Deleting a running action cancels it: a replay of the 3 undeliverable ones at 1 a second,
	// deleted once the first is produced, stops before the last. Its end is proven, not waited for: an
	// action after it on the same queue runs only once its run returned the queue.
	undeliverable := func() int {
		n := 0
		for _, of := range replays(t, adm, tier1) {
			if !want[of] {
				n++
			}
		}
		return n
	}
	slow := newAction(ns, "slow", "dlq", retryv1alpha1.DeadLetterReplay, &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{headers.ReasonUndeliverable}})
	slow.Spec.Rate = &retryv1alpha1.ReplayRate{RecordsPerSecond: 1}
	g.Expect(env.Client.Create(ctx, slow)).To(Succeed())
	g.Eventually(undeliverable, wait, 50*time.Millisecond).Should(BeNumerically(">=", 1))
	g.Expect(env.Client.Delete(ctx, slow)).To(Succeed())
	next := newAction(ns, "after-slow", "dlq", retryv1alpha1.DeadLetterIgnore, &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{"NoSuchReason"}})
	next.Spec.Note = "n"
	g.Expect(env.Client.Create(ctx, next)).To(Succeed())
	g.Eventually(actionPhase(next), wait, poll).Should(Equal(retryv1alpha1.ActionSucceeded))
	g.Expect(undeliverable()).To(BeNumerically("<=", 2), "at most the one in flight after the deletion")

	// A queue that does not exist.
	lost := newAction(ns, "lost", "nowhere", retryv1alpha1.DeadLetterResolve, nil)
	lost.Spec.Note = "n"
	g.Expect(env.Client.Create(ctx, lost)).To(Succeed())
	g.Eventually(actionReady(lost), wait, poll).Should(And(Not(BeNil()), HaveField("Reason", retryv1alpha1.ReasonReferenceNotFound),
		HaveField("Message", ContainSubstring(`DeadLetterQueue "nowhere" not found in namespace `+ns))))
	g.Expect(lost.Status.Phase).To(Equal(retryv1alpha1.ActionPending))
}

// firstUndeliverable is the offset, in partition 0, of the first undeliverable dead letter.
func firstUndeliverable(dls []actionDeadLetter) int {
	n := 0
	for _, dl := range dls {
		if dl.partition != 0 {
			continue
		}
		if dl.reason == headers.ReasonUndeliverable {
			return n
		}
		n++
	}
	return -1
}
