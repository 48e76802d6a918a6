package controllers_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// backoffPolicy is a policy with exponential backoff (x2) and no jitter.
func backoffPolicy(ns, name string, attempts int32, initial, maxDelay time.Duration) *retryv1alpha1.RetryPolicy {
	return &retryv1alpha1.RetryPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: retryv1alpha1.RetryPolicySpec{
			MaxAttempts: attempts,
			Backoff: retryv1alpha1.Backoff{InitialDelay: metav1.Duration{Duration: initial}, Multiplier: "2",
				MaxDelay: metav1.Duration{Duration: maxDelay}},
		},
	}
}

// newPipeline returns a sink-mode pipeline on the suite broker.
func newPipeline(ns, name, source, policy, dlq string) *retryv1alpha1.ConsumerPipeline {
	return &retryv1alpha1.ConsumerPipeline{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: retryv1alpha1.ConsumerPipelineSpec{
			Source:             retryv1alpha1.PipelineSource{Topic: retryv1alpha1.TopicName(source)},
			RetryPolicyRef:     retryv1alpha1.LocalObjectReference{Name: policy},
			DeadLetterQueueRef: retryv1alpha1.LocalObjectReference{Name: dlq},
			Sink:               &retryv1alpha1.Sink{URI: "http://sink.example:8080/"},
		},
	}
}

// pipelineCondition returns the pipeline's condition of the given type for its current generation.
func pipelineCondition(p *retryv1alpha1.ConsumerPipeline, condType string) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil {
			return nil, err
		}
		for i, c := range p.Status.Conditions {
			if c.Type == condType && c.ObservedGeneration == p.Generation {
				return &p.Status.Conditions[i], nil
			}
		}
		return nil, nil
	}
}

func pipelineReady(p *retryv1alpha1.ConsumerPipeline) func() (*metav1.Condition, error) {
	return pipelineCondition(p, retryv1alpha1.ConditionReady)
}

// tierSummary is what tests compare of status.topics.retries.
type tierSummary struct {
	Name       string
	Delay      time.Duration
	Partitions int32
}

func tiersOf(p *retryv1alpha1.ConsumerPipeline) []tierSummary {
	var out []tierSummary
	if p.Status.Topics == nil {
		return nil
	}
	for _, r := range p.Status.Topics.Retries {
		out = append(out, tierSummary{r.Name, r.Delay.Duration, r.Partitions})
	}
	return out
}

// createTopic creates a topic out of band.
func createTopic(t *testing.T, adm *testKafka, topic string, partitions int32) {
	t.Helper()
	if _, err := adm.CreateTopic(context.Background(), partitions, -1, nil, topic); err != nil {
		t.Fatalf("creating %s: %v", topic, err)
	}
}

// pipelineFixture creates a namespace with a dead letter queue "dlq" and returns it.
func pipelineFixture(t *testing.T) (ns string, dlq *retryv1alpha1.DeadLetterQueue) {
	t.Helper()
	ns = newNamespace(t)
	dlq = newDLQ(ns, "dlq", ns+".dlq")
	if err := env.Client.Create(context.Background(), dlq); err != nil {
		t.Fatal(err)
	}
	return ns, dlq
}

func TestPipelineMakesOneRetryTopicPerAttempt(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, dlq := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".orders"
	createTopic(t, adm, source, 4)
	g.Expect(env.Client.Create(ctx, samplePolicy(t, "chatbot", ns))).To(Succeed())
	p := newPipeline(ns, "orders", source, "chatbot", "dlq")
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(isReady(), HaveField("Reason", retryv1alpha1.ReasonTopicsReady)))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()).To(isReady())
	g.Expect(p.Status.ConsumerGroup).To(Equal(ns + ".orders"))
	g.Expect(p.Status.Topics.Source).To(Equal(source))
	g.Expect(p.Status.Topics.SourcePartitions).To(Equal(int32(4)))
	g.Expect(p.Status.Topics.DeadLetter).To(Equal(string(dlq.Spec.Topic.Name)))
	g.Expect(tiersOf(p)).To(Equal([]tierSummary{
		{source + ".retry.1", 2 * time.Second, 4}, {source + ".retry.2", 4 * time.Second, 4}, {source + ".retry.3", 8 * time.Second, 4},
		{source + ".retry.4", 16 * time.Second, 4}, {source + ".retry.5", 32 * time.Second, 4},
	}))
	for _, tier := range tiersOf(p) {
		g.Expect(describe(adm, tier.Name)()).To(HaveField("Partitions", 4), tier.Name)
	}
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Reason", "TopicCreated"), HaveField("Note", ContainSubstring(source+".retry.5")))))

	// A deleted retry topic is recreated within one resync.
	_, err := adm.DeleteTopic(ctx, source+".retry.3")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(describe(adm, source+".retry.3"), oneResync, poll).Should(HaveField("Partitions", 4))
}

func TestPipelineByDelaySharesTiersOfEqualDelay(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".tasks"
	createTopic(t, adm, source, 2)
	// Delays 10s, 20s, 40s, 40s, 40s: the last three share one tier.
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "capped", 6, 10*time.Second, 40*time.Second))).To(Succeed())
	p := newPipeline(ns, "tasks", source, "capped", "dlq")
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{Naming: retryv1alpha1.NamingByDelay, Partitions: ptr.To[int32](3)}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	g.Expect(tiersOf(p)).To(Equal([]tierSummary{
		{source + ".retry.10s", 10 * time.Second, 3}, {source + ".retry.20s", 20 * time.Second, 3}, {source + ".retry.40s", 40 * time.Second, 3},
	}))
	for _, tier := range tiersOf(p) {
		g.Expect(describe(adm, tier.Name)()).To(HaveField("Partitions", 3), tier.Name)
	}
}

func TestPipelineWaitsForItsSourceTopic(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".late"
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 3, time.Second, 10*time.Second))).To(Succeed())
	p := newPipeline(ns, "late", source, "p", "dlq")
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady(retryv1alpha1.ReasonSourceTopicMissing),
		HaveField("Message", ContainSubstring("spec.source.create"))))
	g.Expect(pipelineReady(p)()).To(notReady(retryv1alpha1.ReasonSourceTopicMissing))
	g.Expect(describe(adm, source)()).To(HaveField("Exists", false), "the operator does not create a source it was not asked to")
	g.Expect(describe(adm, source+".retry.1")()).To(HaveField("Exists", false), "no retry topics before the source exists")

	createTopic(t, adm, source, 2)
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), oneResync, poll).Should(isReady())
	g.Expect(tiersOf(p)).To(Equal([]tierSummary{{source + ".retry.1", time.Second, 2}, {source + ".retry.2", 2 * time.Second, 2}}))
}

func TestPipelineCreatesAndGrowsItsSourceTopic(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".created"
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 2, time.Second, time.Second))).To(Succeed())
	p := newPipeline(ns, "created", source, "p", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 2, Config: map[string]string{"cleanup.policy": "delete"}}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())

	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	g.Expect(describe(adm, source)()).To(Equal(topicState{Exists: true, Partitions: 2, Configs: map[string]string{"cleanup.policy": "delete"}}))
	g.Expect(tiersOf(p)).To(Equal([]tierSummary{{source + ".retry.1", time.Second, 2}}))

	// Growing create.partitions grows the source and, following it, the retry topic.
	update(t, p, func(p *retryv1alpha1.ConsumerPipeline) { p.Spec.Source.Create.Partitions = 4 })
	g.Eventually(func() ([]tierSummary, error) {
		_, err := pipelineReady(p)()
		return tiersOf(p), err
	}, wait, poll).Should(Equal([]tierSummary{{source + ".retry.1", time.Second, 4}}))
	g.Expect(p.Status.Topics.SourcePartitions).To(Equal(int32(4)))
	g.Expect(describe(adm, source)()).To(HaveField("Partitions", 4))
	g.Expect(describe(adm, source+".retry.1")()).To(HaveField("Partitions", 4))
}

func TestPipelineRetryTopicsFollowThePolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".changing"
	createTopic(t, adm, source, 1)
	rp := backoffPolicy(ns, "p", 4, time.Second, time.Minute)
	g.Expect(env.Client.Create(ctx, rp)).To(Succeed())
	p := newPipeline(ns, "changing", source, "p", "dlq")
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(func() ([]tierSummary, error) { _, err := pipelineReady(p)(); return tiersOf(p), err }, wait, poll).Should(HaveLen(3))

	// Fewer retries: the tiers no longer needed are reported and, under Retain, kept.
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	g.Eventually(func() ([]string, error) {
		_, err := pipelineReady(p)()
		if p.Status.Topics == nil {
			return nil, err
		}
		return p.Status.Topics.UnusedRetries, err
	}, wait, poll).Should(Equal([]string{source + ".retry.2", source + ".retry.3"}))
	g.Expect(tiersOf(p)).To(Equal([]tierSummary{{source + ".retry.1", time.Second, 1}}))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()).To(isReady())
	g.Expect(describe(adm, source+".retry.3")()).To(HaveField("Exists", true))
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Reason", "TopicKept"), HaveField("Note", ContainSubstring(source+".retry.3")))))

	// Under Delete they are deleted and drop from the list.
	update(t, p, func(p *retryv1alpha1.ConsumerPipeline) {
		p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	})
	rollOut(t, p)
	g.Eventually(func() ([]string, error) {
		_, err := pipelineReady(p)()
		return p.Status.Topics.UnusedRetries, err
	}, wait, poll).Should(BeEmpty())
	g.Expect(describe(adm, source+".retry.2")()).To(HaveField("Exists", false))
	g.Expect(describe(adm, source+".retry.3")()).To(HaveField("Exists", false))
	g.Expect(describe(adm, source+".retry.1")()).To(HaveField("Exists", true))

	// More retries again: the tier comes back.
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 3 })
	g.Eventually(func() ([]tierSummary, error) { _, err := pipelineReady(p)(); return tiersOf(p), err }, wait, poll).Should(HaveLen(2))
	g.Expect(describe(adm, source+".retry.2")()).To(HaveField("Exists", true))
}

func TestPipelineReportsAMissingOrInvalidPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".refs"
	createTopic(t, adm, source, 1)
	p := newPipeline(ns, "refs", source, "delegation", "dlq")
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineReady(p), wait, poll).Should(And(notReady(retryv1alpha1.ReasonReferenceNotFound), HaveField("Message", ContainSubstring(`RetryPolicy "delegation" not found`))))
	// A reference not there yet is what a pipeline created with its policy meets: a Normal event.
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeNormal), HaveField("Reason", retryv1alpha1.ReasonReferenceNotFound))))

	// An invalid policy is reported as such; the pipeline follows the policy without a change of its own.
	rp := samplePolicy(t, "delegation", ns)
	rp.Spec.Classification.Rules[1].MessagePatterns = append(rp.Spec.Classification.Rules[1].MessagePatterns, "(?i)timeout(")
	g.Expect(env.Client.Create(ctx, rp)).To(Succeed())
	g.Eventually(pipelineReady(p), wait, poll).Should(And(notReady(retryv1alpha1.ReasonInvalidSpec), HaveField("Message", ContainSubstring(`RetryPolicy "delegation" is invalid`))))
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Type", corev1.EventTypeWarning), HaveField("Reason", retryv1alpha1.ReasonInvalidSpec))))
	g.Expect(describe(adm, source+".retry.1")()).To(HaveField("Exists", false))

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) {
		ps := rp.Spec.Classification.Rules[1].MessagePatterns
		rp.Spec.Classification.Rules[1].MessagePatterns = ps[:len(ps)-1]
	})
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	g.Expect(tiersOf(p)).To(HaveLen(3))

	// A missing dead letter queue is reported too.
	q := &retryv1alpha1.DeadLetterQueue{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dlq"}, q)).To(Succeed())
	g.Expect(env.Client.Delete(ctx, q)).To(Succeed())
	g.Eventually(pipelineReady(p), wait, poll).Should(And(notReady(retryv1alpha1.ReasonReferenceNotFound), HaveField("Message", ContainSubstring(`DeadLetterQueue "dlq" not found`))))
	g.Expect(p.Status.Topics.DeadLetter).To(BeEmpty())
}

func TestPipelineDeletion(t *testing.T) {
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	g := NewWithT(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 3, time.Second, time.Minute))).To(Succeed())

	for _, policy := range []retryv1alpha1.DeletionPolicy{retryv1alpha1.DeletionPolicyDelete, retryv1alpha1.DeletionPolicyRetain} {
		t.Run(string(policy), func(t *testing.T) {
			g := NewWithT(t)
			source := ns + "." + string(policy)
			name := map[retryv1alpha1.DeletionPolicy]string{retryv1alpha1.DeletionPolicyDelete: "deletes", retryv1alpha1.DeletionPolicyRetain: "retains"}[policy]
			p := newPipeline(ns, name, source, "p", "dlq")
			p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
			p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: policy}
			g.Expect(env.Client.Create(ctx, p)).To(Succeed())
			g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

			g.Expect(env.Client.Delete(ctx, p)).To(Succeed())
			g.Eventually(gone(p), wait, poll).Should(BeTrue())
			base := ns + "." + name
			for _, tier := range []string{base + ".retry.1", base + ".retry.2"} {
				g.Expect(describe(adm, tier)()).To(HaveField("Exists", policy == retryv1alpha1.DeletionPolicyRetain), tier)
			}
			g.Expect(describe(adm, source)()).To(HaveField("Exists", true), "the source topic is never deleted")
			reason := map[retryv1alpha1.DeletionPolicy]string{retryv1alpha1.DeletionPolicyDelete: "TopicDeleted", retryv1alpha1.DeletionPolicyRetain: "TopicKept"}[policy]
			g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
				HaveField("Reason", reason), HaveField("Note", ContainSubstring(base+".retry.2")))))
		})
	}
}

func TestPipelineTopicConflicts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".contested"
	createTopic(t, adm, source, 1)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 3, time.Second, time.Minute))).To(Succeed())

	// A dead letter queue already holds the name of the first retry topic.
	tier1, tier2 := ns+".a-first.retry.1", ns+".a-first.retry.2"
	squatter := newDLQ(ns, "squatter", tier1)
	squatter.Spec.Topic.Partitions = 5
	g.Expect(env.Client.Create(ctx, squatter)).To(Succeed())
	g.Eventually(dlqReady(squatter), wait, poll).Should(isReady())

	first := newPipeline(ns, "a-first", source, "p", "dlq")
	g.Expect(env.Client.Create(ctx, first)).To(Succeed())
	g.Eventually(pipelineReady(first), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicConflict),
		HaveField("Message", ContainSubstring("dead letter topic of DeadLetterQueue "+ns+"/squatter"))))
	g.Expect(describe(adm, tier1)()).To(HaveField("Partitions", 5), "the queue's topic is left alone")
	g.Expect(describe(adm, tier2)()).To(HaveField("Partitions", 1), "the other tier is made")

	// A second pipeline on the same source has tiers of its own, and no conflict.
	second := newPipeline(ns, "b-second", source, "p", "dlq")
	g.Expect(env.Client.Create(ctx, second)).To(Succeed())
	g.Eventually(pipelineCondition(second, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	g.Expect(tiersOf(second)).To(Equal([]tierSummary{{ns + ".b-second.retry.1", time.Second, 1}, {ns + ".b-second.retry.2", 2 * time.Second, 1}}))

	// The queue goes (Retain): its topic is not the pipeline's, which leaves it alone until it
	// adopts it; then it manages it.
	g.Expect(env.Client.Delete(ctx, squatter)).To(Succeed())
	g.Eventually(pipelineReady(first), wait, poll).Should(And(notReady(retryv1alpha1.ReasonTopicNotOwned),
		HaveField("Message", ContainSubstring(tier1))))
	update(t, first, func(p *retryv1alpha1.ConsumerPipeline) {
		p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1, ExistingTopic: retryv1alpha1.ExistingTopicAdopt}
	})
	g.Eventually(pipelineReady(first), wait, poll).Should(And(notReady(retryv1alpha1.ReasonPartitionShrinkRefused),
		HaveField("Message", ContainSubstring(tier1))))
	g.Expect(pipelineCondition(second, retryv1alpha1.ConditionTopicsReady)()).To(isReady())
}

// TestPipelineDeletionFollowsItsRecordOfCreatedTopics: the topics a pipeline creates are recorded in
// the topic ledger (a ConfigMap in the manager's namespace) before they are made, and its deletion
// policy follows that record, not its status nor its annotations: with both wiped clean (as by a
// restore from a backup without status) its retry tiers are still deleted, and its source never.
func TestPipelineDeletionFollowsItsRecordOfCreatedTopics(t *testing.T) {
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	g := NewWithT(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "p", 3, time.Second, time.Minute))).To(Succeed())
	source := ns + ".recorded"
	p := newPipeline(ns, "recorded", source, "p", "dlq")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	tiers := []string{source + ".retry.1", source + ".retry.2"}
	ledger := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, client.ObjectKey{Namespace: envtestutil.OperatorNamespace, Name: "topics-" + string(p.UID)}, ledger)).To(Succeed())
	g.Expect(ledger.Data).To(HaveKeyWithValue("topics", strings.Join(append([]string{source}, tiers...), "\n")))
	update(t, p, func(p *retryv1alpha1.ConsumerPipeline) { p.Annotations = nil })

	before := p.DeepCopy()
	p.Status = retryv1alpha1.ConsumerPipelineStatus{}
	g.Expect(env.Client.Status().Patch(ctx, p, client.MergeFrom(before))).To(Succeed())
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	g.Expect(p.Status.Topics).To(BeNil())

	g.Expect(env.Client.Delete(ctx, p)).To(Succeed())
	g.Eventually(gone(p), wait, poll).Should(BeTrue())
	for _, tier := range tiers {
		g.Expect(describe(adm, tier)()).To(HaveField("Exists", false), tier)
	}
	g.Expect(describe(adm, source)()).To(HaveField("Exists", true), "the source topic is never deleted")
}

// A retry tier no longer needed still holds records: under Delete it is kept until the pipeline's
// consumer group has consumed them, then deleted; an empty one goes as soon as the consumers rolled
// out the new config.
func TestPipelineKeepsAnUnusedRetryTopicUntilItIsConsumed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	adm := newKadm(t)
	source := ns + ".draining"
	createTopic(t, adm, source, 1)
	rp := backoffPolicy(ns, "p", 4, time.Second, time.Minute)
	g.Expect(env.Client.Create(ctx, rp)).To(Succeed())
	p := newPipeline(ns, "draining", source, "p", "dlq")
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(func() ([]tierSummary, error) { _, err := pipelineReady(p)(); return tiersOf(p), err }, wait, poll).Should(HaveLen(3))

	// Two records wait in the third tier when the policy drops it (and the second).
	tier2, tier3 := source+".retry.2", source+".retry.3"
	produce(t, broker.ListenAddrs(), tier3, map[int32]int{0: 2})
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	unused := func() ([]string, error) {
		_, err := pipelineReady(p)()
		if p.Status.Topics == nil {
			return nil, err
		}
		return p.Status.Topics.UnusedRetries, err
	}
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{source + ".retry.1"}, Draining: []string{tier3}}))
	rollOut(t, p)
	g.Eventually(unused, wait, poll).Should(Equal([]string{tier3}))
	g.Expect(describe(adm, tier2)()).To(HaveField("Exists", false), "the empty tier is deleted once the consumers rolled out")
	holdsThroughResync(t, p, describe(adm, tier3), HaveField("Exists", true), "records wait in it")
	g.Eventually(eventsFor(ns, p.Name), wait, poll).Should(ContainElement(And(
		HaveField("Reason", "TopicDraining"), HaveField("Note", ContainSubstring("2 records wait in it")))))

	// Once the group has consumed them, it goes too.
	commitOffsets(t, adm, ns+".draining", map[string]map[int32]int64{tier3: {0: 2}})
	g.Eventually(unused, wait, poll).Should(BeEmpty())
	g.Expect(describe(adm, tier3)()).To(HaveField("Exists", false))
}
