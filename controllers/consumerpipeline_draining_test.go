package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// Retry tiers a policy change leaves behind are drained: while they hold records the pipeline's
// consumer group has not consumed, the dispatcher config lists them under topics.draining (whatever
// the deletion policy); once the group's commits reach their end they leave it and, under Delete,
// are deleted once the consumer Deployment has rolled out a config that no longer writes to them
// (rollOut sets its status, which nothing else does in the suite).

// configTopics is what these tests compare of the dispatcher config a pipeline's ConfigMap holds.
type configTopics struct {
	Retries  []string
	Draining []string
}

// dispatcherTopics reads the pipeline's ConfigMap and returns the retry and draining topics of its
// dispatcher config.
func dispatcherTopics(p *retryv1alpha1.ConsumerPipeline) func() (configTopics, error) {
	return func() (configTopics, error) {
		cm := configMapOf(p)
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cm), cm); err != nil {
			return configTopics{}, err
		}
		var c dispatchercfg.Config
		if err := json.Unmarshal([]byte(cm.Data[render.ConfigKey]), &c); err != nil {
			return configTopics{}, err
		}
		return configTopics{Retries: c.Topics.Retries.Names(), Draining: c.Topics.Draining}, nil
	}
}

// pipelineTopicsOf reads the pipeline and returns status.topics (empty when absent).
func pipelineTopicsOf(p *retryv1alpha1.ConsumerPipeline) func() (retryv1alpha1.PipelineTopics, error) {
	return func() (retryv1alpha1.PipelineTopics, error) {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), p); err != nil || p.Status.Topics == nil {
			return retryv1alpha1.PipelineTopics{}, err
		}
		return *p.Status.Topics, nil
	}
}

// eventAbout matches an event of the given type and reason whose note names topic.
func eventAbout(typ, reason, topic string) OmegaMatcher {
	return And(HaveField("Type", typ), HaveField("Reason", reason), HaveField("Note", ContainSubstring(topic)))
}

// drainingPipeline creates a pipeline with 3 retry tiers (4 attempts) under deletion policy dp and
// waits for them. It returns the pipeline, its policy and the names of its three tiers.
func drainingPipeline(t *testing.T, name string, dp retryv1alpha1.DeletionPolicy) (*retryv1alpha1.ConsumerPipeline, *retryv1alpha1.RetryPolicy, [3]string) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	ns, _ := pipelineFixture(t)
	source := ns + "." + name
	createTopic(t, newKadm(t), source, 1)
	rp := backoffPolicy(ns, "p", 4, time.Second, time.Minute)
	g.Expect(env.Client.Create(ctx, rp)).To(Succeed())
	p := newPipeline(ns, name, source, "p", "dlq")
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: dp}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	tiers := [3]string{source + ".retry.1", source + ".retry.2", source + ".retry.3"}
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers[:]}))
	return p, rp, tiers
}

// TestPipelineDrainsTheRetryTopicsItNoLongerUses: lowering maxAttempts with records left in the
// third tier (the group consumed one of two) lists that tier under topics.draining, under Retain as
// under Delete, and keeps it there until the group's committed offset reaches its end; then it
// leaves the list and is deleted (Delete) or kept (Retain). The empty second tier never drains.
func TestPipelineDrainsTheRetryTopicsItNoLongerUses(t *testing.T) {
	for _, dp := range []retryv1alpha1.DeletionPolicy{retryv1alpha1.DeletionPolicyRetain, retryv1alpha1.DeletionPolicyDelete} {
		t.Run(string(dp), func(t *testing.T) {
			g := NewWithT(t)
			adm := newKadm(t)
			p, rp, tiers := drainingPipeline(t, "drains-"+strings.ToLower(string(dp)), dp)
			tier1, tier2, tier3 := tiers[0], tiers[1], tiers[2]
			produce(t, broker.ListenAddrs(), tier3, map[int32]int{0: 2})
			group := p.Namespace + "." + p.Name
			commitOffsets(t, adm, group, map[string]map[int32]int64{tier3: {0: 1}})

			update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
			draining := configTopics{Retries: []string{tier1}, Draining: []string{tier3}}
			g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(draining))
			rollOut(t, p)
			g.Eventually(pipelineTopicsOf(p), wait, poll).Should(HaveField("DrainingRetries", []string{tier3}))
			holdsThroughResync(t, p, dispatcherTopics(p), Equal(draining), "one record is left")
			g.Expect(describe(adm, tier3)()).To(HaveField("Exists", true))
			unused := []string{tier3}
			if dp == retryv1alpha1.DeletionPolicyRetain {
				unused = []string{tier2, tier3}
			}
			g.Expect(pipelineTopicsOf(p)()).To(HaveField("UnusedRetries", unused))
			g.Expect(describe(adm, tier2)()).To(HaveField("Exists", dp == retryv1alpha1.DeletionPolicyRetain), "the empty tier")
			g.Eventually(eventsFor(p.Namespace, p.Name), wait, poll).Should(ContainElement(And(
				eventAbout(corev1.EventTypeNormal, "TopicDraining", tier3), HaveField("Note", ContainSubstring("1 record")))))

			// The group consumes the last record: the tier is drained.
			commitOffsets(t, adm, group, map[string]map[int32]int64{tier3: {0: 2}})
			g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{tier1}}))
			g.Eventually(pipelineTopicsOf(p), wait, poll).Should(HaveField("DrainingRetries", BeEmpty()))
			if dp == retryv1alpha1.DeletionPolicyDelete {
				g.Eventually(pipelineTopicsOf(p), wait, poll).Should(HaveField("UnusedRetries", BeEmpty()))
				g.Expect(describe(adm, tier3)()).To(HaveField("Exists", false))
				g.Eventually(eventsFor(p.Namespace, p.Name), wait, poll).Should(ContainElement(eventAbout(corev1.EventTypeNormal, "TopicDeleted", tier3)))
			} else {
				g.Expect(pipelineTopicsOf(p)()).To(HaveField("UnusedRetries", []string{tier2, tier3}))
				g.Expect(describe(adm, tier3)()).To(HaveField("Exists", true))
				g.Eventually(eventsFor(p.Namespace, p.Name), wait, poll).Should(ContainElement(eventAbout(corev1.EventTypeNormal, "TopicDrained", tier3)))
			}
			events, err := eventsFor(p.Namespace, p.Name)()
			g.Expect(err).NotTo(HaveOccurred())
			for _, e := range events {
				g.Expect(e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, tier3)).To(BeFalse(),
					"no Warning event about a tier for normal progress: %s: %s", e.Reason, e.Note)
			}
		})
	}
}

// failListOffsets makes the suite broker answer every ListOffsets request naming topic with
// UNKNOWN_SERVER_ERROR on all its partitions while the returned flag is set.
func failListOffsets(topic string) *atomic.Bool {
	var failing atomic.Bool
	broker.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
		broker.KeepControl()
		lo := req.(*kmsg.ListOffsetsRequest)
		if !failing.Load() || !strings.Contains(topicsOf(lo), "|"+topic+"|") {
			return nil, nil, false
		}
		resp := kmsg.NewPtrListOffsetsResponse()
		resp.Version = lo.Version
		for _, rt := range lo.Topics {
			t := kmsg.NewListOffsetsResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewListOffsetsResponseTopicPartition()
				p.Partition, p.ErrorCode = rp.Partition, kerr.UnknownServerError.Code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	return &failing
}

func topicsOf(req *kmsg.ListOffsetsRequest) string {
	s := "|"
	for _, t := range req.Topics {
		s += t.Topic + "|"
	}
	return s
}

// TestPipelineKeepsDrainingWhileOffsetsCannotBeRead: while the offsets of the tiers a policy change
// left behind cannot be listed, nothing is dropped from topics.draining (the tiers the previous
// config consumed are all listed) and nothing is deleted; once they can be, only the tier with
// records is left, until the group has consumed it.
func TestPipelineKeepsDrainingWhileOffsetsCannotBeRead(t *testing.T) {
	g := NewWithT(t)
	adm := newKadm(t)
	p, rp, tiers := drainingPipeline(t, "blind", retryv1alpha1.DeletionPolicyDelete)
	tier1, tier2, tier3 := tiers[0], tiers[1], tiers[2]
	produce(t, broker.ListenAddrs(), tier3, map[int32]int{0: 2})
	failing := failListOffsets(tier3)
	t.Cleanup(func() { failing.Store(false) })

	// The policy changes while the offsets cannot be read: both old tiers drain, none is deleted.
	failing.Store(true)
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	blind := configTopics{Retries: []string{tier1}, Draining: []string{tier2, tier3}}
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(blind))
	rollOut(t, p)
	holdsThroughResync(t, p, dispatcherTopics(p), Equal(blind))
	g.Expect(eventsFor(p.Namespace, p.Name)()).To(ContainElement(And(eventAbout(corev1.EventTypeNormal, "TopicDraining", tier2),
		HaveField("Note", ContainSubstring("not known yet")))))
	g.Expect(describe(adm, tier2)()).To(HaveField("Exists", true))
	g.Expect(describe(adm, tier3)()).To(HaveField("Exists", true))

	// Readable again: the empty tier goes, the other drains.
	failing.Store(false)
	draining := configTopics{Retries: []string{tier1}, Draining: []string{tier3}}
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(draining))
	g.Eventually(describe(adm, tier2), wait, poll).Should(HaveField("Exists", false))
	rollOut(t, p)

	// Consumed to the end while the offsets cannot be read: it stays, and is not deleted. The commit
	// waits for a reconcile that could not read them (TopicsReady False): reconciles of one pipeline
	// run one at a time, so none that read the offsets before the failure is still under way (one
	// that read the tier's end before and the group's commit after would rightly find it drained).
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(HaveField("Status", BeEquivalentTo("True")))
	failing.Store(true)
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(HaveField("Status", BeEquivalentTo("False")))
	commitOffsets(t, adm, p.Namespace+"."+p.Name, map[string]map[int32]int64{tier3: {0: 2}})
	holdsThroughResync(t, p, dispatcherTopics(p), Equal(draining))
	g.Expect(describe(adm, tier3)()).To(HaveField("Exists", true))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()).To(HaveField("Status", BeEquivalentTo("False")))

	failing.Store(false)
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{tier1}}))
	g.Eventually(describe(adm, tier3), wait, poll).Should(HaveField("Exists", false))
}

// TestPipelineKeepsLookingAtDrainingTiersWhileWaitingForASpecChange: a pipeline whose only problem
// is a spec error waits for a change instead of being requeued, but not while tiers drain: a
// drained tier still goes without any other event.
func TestPipelineKeepsLookingAtDrainingTiersWhileWaitingForASpecChange(t *testing.T) {
	g := NewWithT(t)
	adm := newKadm(t)
	p, rp, tiers := drainingPipeline(t, "waits", retryv1alpha1.DeletionPolicyDelete)
	tier1, tier3 := tiers[0], tiers[2]
	produce(t, broker.ListenAddrs(), tier3, map[int32]int{0: 2})
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{tier1}, Draining: []string{tier3}}))
	rollOut(t, p)

	// Template mode with a volume named like the operator's own: InvalidSpec, a user error.
	update(t, p, func(p *retryv1alpha1.ConsumerPipeline) {
		p.Spec.Sink = nil
		p.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}},
			Volumes:    []corev1.Volume{{Name: render.ConfigVolume}},
		}}
	})
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionDeploymentReady), wait, poll).Should(notReady(retryv1alpha1.ReasonInvalidSpec))
	g.Expect(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady)()).To(isReady())
	awaitResync(t, p) // the pipeline now waits for a spec change, but for its draining tiers

	commitOffsets(t, adm, p.Namespace+"."+p.Name, map[string]map[int32]int64{tier3: {0: 2}})
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{tier1}}))
	g.Eventually(describe(adm, tier3), wait, poll).Should(HaveField("Exists", false))
}

// TestPipelineDrainsAtMost32TiersAtOnce: of 33 unused tiers holding records, the first 32 by name
// drain; TopicsReady names the last and says its records wait; once a tier is drained, it drains.
func TestPipelineDrainsAtMost32TiersAtOnce(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	adm := newKadm(t)
	ns, _ := pipelineFixture(t)
	source := ns + ".many"
	createTopic(t, adm, source, 1)
	rp := backoffPolicy(ns, "p", 35, time.Second, time.Minute)
	g.Expect(env.Client.Create(ctx, rp)).To(Succeed())
	p := newPipeline(ns, "many", source, "p", "dlq")
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	g.Eventually(func() (int, error) { c, err := dispatcherTopics(p)(); return len(c.Retries), err }, wait, poll).Should(Equal(34))

	var old []string
	for i := 2; i <= 34; i++ {
		old = append(old, source+".retry."+strconv.Itoa(i))
		produce(t, broker.ListenAddrs(), old[len(old)-1], map[int32]int{0: 1})
	}
	slices.Sort(old)
	last := old[32]
	g.Expect(last).To(Equal(source + ".retry.9"))
	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{source + ".retry.1"}, Draining: old[:32]}))
	rollOut(t, p)
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(And(notReady("TooManyDrainingTiers"),
		HaveField("Message", And(ContainSubstring(last), ContainSubstring("not consumed until the list shrinks")))))

	commitOffsets(t, adm, p.Namespace+"."+p.Name, map[string]map[int32]int64{old[0]: {0: 1}})
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{source + ".retry.1"}, Draining: old[1:]}))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())
	// Deleted at the reconcile that finds it drained or at a later one, not before TopicsReady.
	g.Eventually(describe(adm, old[0]), wait, poll).Should(HaveField("Exists", false))
}

// setDeploymentStatus waits until the pipeline's Deployment carries the config hash of its current
// ConfigMap (the children of the last config are applied), then sets its status with set (through
// the status subresource: the suite runs no kube-controller-manager, so nothing else does).
func setDeploymentStatus(t *testing.T, p *retryv1alpha1.ConsumerPipeline, set func(d *appsv1.Deployment)) {
	t.Helper()
	ctx := context.Background()
	NewWithT(t).Eventually(func() error {
		cm, d := configMapOf(p), deploymentOf(p)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(cm), cm); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		if got, want := d.Spec.Template.Annotations[render.AnnotationConfigHash], render.ConfigHash(cm); got != want {
			return fmt.Errorf("the Deployment has config hash %q, the ConfigMap %q", got, want)
		}
		set(d)
		return env.Client.Status().Update(ctx, d)
	}, wait, poll).Should(Succeed())
}

// rollOut sets the pipeline's Deployment status to a finished rollout of its current generation:
// every replica runs the current pod template.
func rollOut(t *testing.T, p *retryv1alpha1.ConsumerPipeline) {
	t.Helper()
	setDeploymentStatus(t, p, func(d *appsv1.Deployment) {
		n := ptr.Deref(d.Spec.Replicas, 1)
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	})
}

// TestPipelineDeletesADrainedTierOnlyOnceTheConsumersRolledOut: under Delete, a tier a policy change
// left behind is deleted once drained only when no consumer can still write to it: while the
// Deployment has not rolled out the template rendered after the change (its controller has not
// observed the generation, or pods of the older ReplicaSet are left), pods running the old config
// may still retry into it, so it is kept (listed in status.topics.unusedRetries, with one Normal
// event) across reconciles; once the rollout is done, it goes.
func TestPipelineDeletesADrainedTierOnlyOnceTheConsumersRolledOut(t *testing.T) {
	g := NewWithT(t)
	adm := newKadm(t)
	p, rp, tiers := drainingPipeline(t, "rollout", retryv1alpha1.DeletionPolicyDelete)
	tier1, tier2, tier3 := tiers[0], tiers[1], tiers[2]
	produce(t, broker.ListenAddrs(), tier3, map[int32]int{0: 2})
	commitOffsets(t, adm, p.Namespace+"."+p.Name, map[string]map[int32]int64{tier3: {0: 2}})

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: []string{tier1}}), "both old tiers are drained")
	stillThere := func() {
		t.Helper()
		holdsThroughResync(t, p, func() ([]bool, error) {
			s2, err := describe(adm, tier2)()
			if err != nil {
				return nil, err
			}
			s3, err := describe(adm, tier3)()
			return []bool{s2.Exists, s3.Exists}, err
		}, Equal([]bool{true, true}))
		g.Expect(pipelineTopicsOf(p)()).To(HaveField("UnusedRetries", []string{tier2, tier3}))
	}

	// The Deployment's controller has not observed the new template yet.
	setDeploymentStatus(t, p, func(d *appsv1.Deployment) {
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation - 1, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	})
	stillThere()
	// It has, but a pod of the older ReplicaSet is left.
	setDeploymentStatus(t, p, func(d *appsv1.Deployment) {
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2}
	})
	stillThere()
	g.Expect(eventsFor(p.Namespace, p.Name)()).To(ContainElement(And(
		eventAbout(corev1.EventTypeNormal, "TopicAwaitingRollout", tier2), eventAbout(corev1.EventTypeNormal, "TopicAwaitingRollout", tier3))))

	// Rolled out: both go.
	rollOut(t, p)
	g.Eventually(pipelineTopicsOf(p), wait, poll).Should(HaveField("UnusedRetries", BeEmpty()))
	g.Expect(describe(adm, tier2)()).To(HaveField("Exists", false))
	g.Expect(describe(adm, tier3)()).To(HaveField("Exists", false))
	events, err := eventsFor(p.Namespace, p.Name)()
	g.Expect(err).NotTo(HaveOccurred())
	for _, tier := range []string{tier2, tier3} {
		n := 0
		for _, e := range events {
			if e.Reason == "TopicAwaitingRollout" && strings.Contains(e.Note, tier) {
				n++
			}
		}
		// One when the wait begins; a second one when a reconcile saw the tier still listed as
		// draining before its drained state reached the status (timing), never one per resync.
		g.Expect(n).To(BeNumerically("~", 1, 1), "events about the rollout wait for %s", tier)
	}
}

// TestAPipelineRecreatesTheTiersItDeletedWhenItsPolicyWantsThemBack: under deletionPolicy Delete,
// the tiers a policy change left behind are deleted (and forgotten by the ledger); the policy
// raised again wants them back. The pipeline's generation did not change and its topics were
// settled, so it reads the connection's snapshot of descriptions: a deletion the operator made
// itself must be in it, or the snapshot says the tiers exist (and, unowned, someone else's) until
// the next round, which on this still clock never comes.
func TestAPipelineRecreatesTheTiersItDeletedWhenItsPolicyWantsThemBack(t *testing.T) {
	r := startSteadyRun(t, 1, 1, steadyInterval)
	r.settle()
	g := NewWithT(t)
	label := map[string]string{benchmarkLabel: r.ns}
	rp := backoffPolicy(r.ns, "four", 4, time.Second, time.Minute)
	rp.SetLabels(label)
	g.Expect(r.api.Create(r.ctx, rp)).To(Succeed())
	p := newPipeline(r.ns, "cpl-del", "steady.del", "four", "dlq-000")
	p.Spec.Source.Create = &retryv1alpha1.TopicCreation{Partitions: 1}
	p.Spec.RetryTopics = &retryv1alpha1.RetryTopics{DeletionPolicy: retryv1alpha1.DeletionPolicyDelete}
	p.SetLabels(label)
	g.Expect(r.api.Create(r.ctx, p)).To(Succeed())
	base := r.ns + ".cpl-del.retry."
	tiers := []string{base + "1", base + "2", base + "3"}
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers}))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 2 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers[:1]}))
	rollOut(t, p)
	adm := newKadm(t, r.clusters[0].ListenAddrs()...)
	for _, tier := range tiers[1:] {
		g.Eventually(describe(adm, tier), wait, poll).Should(HaveField("Exists", false), "%s deleted", tier)
	}
	g.Eventually(pipelineTopicsOf(p), wait, poll).Should(HaveField("UnusedRetries", BeEmpty()))
	g.Eventually(pipelineCondition(p, retryv1alpha1.ConditionTopicsReady), wait, poll).Should(isReady())

	update(t, rp, func(rp *retryv1alpha1.RetryPolicy) { rp.Spec.MaxAttempts = 4 })
	g.Eventually(dispatcherTopics(p), wait, poll).Should(Equal(configTopics{Retries: tiers}))
	for _, tier := range tiers[1:] {
		g.Eventually(describe(adm, tier), wait, poll).Should(HaveField("Exists", true), "%s recreated", tier)
	}
	g.Eventually(func() (*metav1.Condition, error) {
		got := &retryv1alpha1.ConsumerPipeline{}
		if err := r.api.Get(r.ctx, client.ObjectKeyFromObject(p), got); err != nil {
			return nil, err
		}
		return findCondition(got.Status.Conditions, retryv1alpha1.ConditionTopicsReady), nil
	}, wait, poll).Should(isReady())
	events, err := eventsFor(p.Namespace, p.Name)()
	g.Expect(err).NotTo(HaveOccurred())
	for _, e := range events {
		g.Expect(e.Type).NotTo(Equal(corev1.EventTypeWarning), "a Warning for the operator's own tiers coming back: %s: %s", e.Reason, e.Note)
	}
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
