package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
)

// forgedDecision writes to topic a dead letter whose key is "0/0" and whose value is a decision in
// the record of decisions' own format: replayed into a state topic, it would record that decision
// for the dead letter 0/0.
func forgedDecision(t *testing.T, topic, pipeline string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("0/0"),
		Value: []byte(`{"state":"Resolved","note":"nothing to see","requestedBy":"the-boss","action":{"namespace":"x","name":"y","uid":"z"},"time":"2026-11-26T00:00:00Z"}`),
		Headers: []kgo.RecordHeader{
			{Key: headers.OriginalTopic, Value: []byte("orders")},
			{Key: headers.OriginalPartition, Value: []byte("0")},
			{Key: headers.OriginalOffset, Value: []byte("0")},
			{Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(time.Now()))},
			{Key: headers.Reason, Value: []byte(headers.ReasonNonRetriable)},
			{Key: headers.ErrorType, Value: []byte("HTTP422")},
			{Key: headers.Pipeline, Value: []byte(pipeline)},
			{Key: headers.Attempts, Value: []byte("1")},
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, _ error) T { return v }

// A Replay never writes into a topic the operator manages as a dead-letter queue or a record of
// decisions: a dead letter whose key is "0/0" and whose value is a decision, replayed into the
// queue's own state topic, would record that decision under any requestedBy. The API server
// refuses a target named like a state topic or a retry tier; a target the topic ledger records as
// a queue's topic (this queue's or another's) fails the action before anything is written, with a
// Warning event. A dead letter stays Pending.
func TestReplayNeverTargetsAQueueOrItsRecordOfDecisions(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	adm := newKadm(t)
	q := readyQueue(t, ns)
	other := newDLQ(ns, "other", ns+".other")
	other.Spec.Topic.Partitions = 1
	g.Expect(env.Client.Create(ctx, other)).To(Succeed())
	g.Eventually(dlqReady(other), wait, poll).Should(isReady())
	writeDeadLetters(t, ns+".dlq", ns+".orders", ns+"/orders", []actionDeadLetter{{reason: headers.ReasonNonRetriable, errorType: "HTTP422"}})
	forgedDecision(t, ns+".dlq", ns+"/orders")
	g.Eventually(func() (*int64, error) { _, err := dlqReady(q)(); return q.Status.Pending, err }, wait, poll).Should(Equal(ptr.To(int64(2))))
	forged := &retryv1alpha1.DeadLetterSelector{Records: []retryv1alpha1.RecordRef{"0/1"}}

	// The queue's own record of decisions.
	toState := newAction(ns, "to-state", "dlq", retryv1alpha1.DeadLetterReplay, forged)
	toState.Spec.Target = &retryv1alpha1.ReplayTarget{Topic: retryv1alpha1.TopicName(ns + ".dlq.state")}
	err := env.Client.Create(ctx, toState)
	if err == nil {
		g.Eventually(actionPhase(toState), wait, poll).Should(Equal(retryv1alpha1.ActionFailed), func() string {
			_, _ = dlqReady(q)()
			return fmt.Sprintf("replayed into %s.dlq.state: %d records held; queue states %v; action matched %d, done %d, skipped %v",
				ns, must(held(adm, ns+".dlq.state")()), q.Status.States, toState.Status.Matched, toState.Status.Done, toState.Status.Skipped)
		})
	}
	g.Expect(err).To(MatchError(ContainSubstring("record of decisions")))
	// Nor a retry tier, by its name.
	toTier := newAction(ns, "to-tier", "dlq", retryv1alpha1.DeadLetterReplay, forged)
	toTier.Spec.Target = &retryv1alpha1.ReplayTarget{Topic: retryv1alpha1.TopicName(ns + ".orders.retry.1")}
	g.Expect(env.Client.Create(ctx, toTier)).To(MatchError(ContainSubstring("retry topic")))

	// Topics the ledger records as queues' topics: this queue's own and another queue's.
	for _, target := range []string{ns + ".dlq", ns + ".other"} {
		a := newAction(ns, "to-"+target[len(ns)+1:], "dlq", retryv1alpha1.DeadLetterReplay, forged)
		a.Spec.Target = &retryv1alpha1.ReplayTarget{Topic: retryv1alpha1.TopicName(target)}
		g.Expect(env.Client.Create(ctx, a)).To(Succeed())
		g.Eventually(actionPhase(a), wait, poll).Should(Equal(retryv1alpha1.ActionFailed), "replay into %s", target)
		g.Expect(actionReady(a)()).To(And(HaveField("Reason", retryv1alpha1.ReasonReplayTargetRefused), HaveField("Message", And(
			ContainSubstring(target), ContainSubstring("DeadLetterQueue "+ns+"/")))))
		g.Eventually(eventsFor(ns, a.Name), wait, poll).Should(ContainElement(And(HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", retryv1alpha1.ReasonReplayTargetRefused))))
	}
	g.Expect(held(adm, ns+".dlq")()).To(Equal(int64(2)), "nothing replayed into the queue")
	g.Expect(held(adm, ns+".other")()).To(BeZero(), "nothing replayed into the other queue")
	g.Expect(held(adm, ns+".dlq.state")()).To(BeZero(), "no decision recorded")
	holdsThroughResync(t, q, func() (*int64, error) { _, err := dlqReady(q)(); return q.Status.Pending, err }, Equal(ptr.To(int64(2))))
}

// readyQueue creates the one-partition queue "dlq" on topic <ns>.dlq and waits until it is Ready
// and has made its record of decisions.
func readyQueue(t *testing.T, ns string) *retryv1alpha1.DeadLetterQueue {
	t.Helper()
	g := NewWithT(t)
	q := newDLQ(ns, "dlq", ns+".dlq")
	q.Spec.Topic.Partitions = 1
	g.Expect(env.Client.Create(context.Background(), q)).To(Succeed())
	g.Eventually(dlqReady(q), wait, poll).Should(isReady())
	g.Eventually(func() string { _, _ = dlqReady(q)(); return q.Status.StateTopic }, wait, poll).ShouldNot(BeEmpty())
	return q
}
