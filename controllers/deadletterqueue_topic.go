package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/render"
)

// reconcileAlerts is the alerts phase: it applies the queue's own alert rules (size, growth, oldest
// dead letter), owned by the queue. It comes before the Kafka phases, which the rules do not depend
// on, so that they are in place while the brokers are unreachable. A problem (a name taken by
// another owner) makes Ready False without stopping the other phases.
func (r *DeadLetterQueueReconciler) reconcileAlerts(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, ps *problems) error {
	in := &render.DeadLetterQueueInputs{DLQ: dlq, RuleLabels: r.RuleLabels, RunbookBaseURL: r.RunbookBaseURL}
	set, err := render.DeadLetterQueueRuleSet(in)
	if err == nil {
		_, err = r.Rules.Apply(ctx, r.Client, r.Applied, dlq, set)
	}
	return recordProblem(ps, childProblem(err))
}

// connectQueue resolves spec.kafka and gets a client, into k.
func (r *DeadLetterQueueReconciler) connectQueue(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, k *kafkaClient) error {
	return r.connect(ctx, k, dlqOwner(client.ObjectKeyFromObject(dlq)), dlq.Namespace, dlq.Spec.Kafka)
}

// claimTopic makes sure the claim policy gives this queue its topic and that it is the oldest one
// claiming it on its cluster (topicOwner); a newer one reports the conflict and leaves the topic
// alone. The policy is checked at every reconcile, not only when the topic is taken: a queue whose
// ledger record holds a topic the policy now gives another namespace holds nothing either.
func (r *DeadLetterQueueReconciler) claimTopic(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, k *kafkaClient) error {
	if p := r.claimProblem(dlq, string(dlq.Spec.Topic.Name)); p != nil {
		r.Kafka.Offsets.Forget(dlqOwner(client.ObjectKeyFromObject(dlq)))
		return p
	}
	winner, unknown, err := r.topicOwner(ctx, dlq, k)
	if err != nil {
		return err
	}
	if winner.UID == dlq.UID {
		return nil
	}
	r.Kafka.Offsets.Forget(dlqOwner(client.ObjectKeyFromObject(dlq)))
	return &problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
		"topic %q is already managed by %s, created earlier%s; this queue leaves the topic alone until that one is deleted",
		spec.want.Name, winner, unknownClusterNote(map[types.UID]bool{winner.UID: unknown}, winner.UID)), maxConditionMessage)}
}

// dlqTopics is what the topics phase found and did.
type dlqTopics struct {
	// topic is the queue's topic as it is after the phase's changes; nil when it was not described.
	topic *kafka.TopicInfo
	// stateHave is the record of decisions as described; stateTopic is its name once it exists as
	// specified ("" until then).
	stateHave  kafka.TopicInfo
	stateTopic string
	// changes are what the phase changed in Kafka, for one event of reason changeReason
	// (recordTopicChanges).
	changes      []string
	changeReason string
}

// topicID is the ID of the queue's topic as the phase described it ("" when the brokers give none,
// or the topic was created by this reconcile: it holds no decided dead letter yet).
func (t dlqTopics) topicID() string {
	if t.topic == nil {
		return ""
	}
	return t.topic.ID
}

// topics is the topics phase: the queue's topic (reconcileTopic), then its record of decisions
// (reconcileStateTopic). A problem that does not stop the next step is recorded in ps.
func (r *DeadLetterQueueReconciler) topics(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, k *kafkaClient, ps *problems) (dlqTopics, error) {
	var t dlqTopics
	if err := r.reconcileTopic(ctx, dlq, spec, k, &t, ps); err != nil {
		return t, err
	}
	return t, named("StateTopic", r.reconcileStateTopic(ctx, dlq, spec, k, &t, ps))
}

// reconcileTopic creates the topic, grows its partitions and sets its configs back when they
// drifted. More partitions than the spec asks for are reported, never "fixed". Only a topic the
// operator created for this queue (or adopted, with existingTopic: Adopt) is managed: an existing
// topic of anyone else is left unchanged and unread (TopicNotOwned). A topic about to be created or
// adopted must be one the manager's claim policy gives the namespace, and is first recorded in the
// topic ledger.
func (r *DeadLetterQueueReconciler) reconcileTopic(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, k *kafkaClient, t *dlqTopics, ps *problems) error {
	want := spec.want
	names := []string{want.Name}
	if spec.stateWant.Name != "" {
		names = append(names, spec.stateWant.Name)
	}
	got, err := r.Kafka.Topics.Describe(ctx, k.admin, k.connKey, dlqOwner(client.ObjectKeyFromObject(dlq)), names, spec.interval, dlqSettled(dlq))
	if err != nil {
		return kafkaProblem(err)
	}
	k.readClusterID(ctx)
	have := got[want.Name]
	t.stateHave = got[spec.stateWant.Name]
	owned, err := r.ownedTopics(ctx, dlq)
	if err != nil {
		return named("Topic", err)
	}
	wasOwned := slices.Contains(owned, want.Name)
	if !wasOwned {
		take := []takenTopic{{want.Name, have}}
		// The record of decisions is taken with the topic when it may be: one write of the ledger,
		// not two. When it may not, reconcileStateTopic reports why.
		if n := spec.stateWant.Name; n != "" && !slices.Contains(owned, n) {
			take = append(take, takenTopic{n, t.stateHave})
		}
		if err := r.takeTopics(ctx, dlq, take...); err != nil {
			return named("Topic", err)
		}
	}
	plan := kafka.PlanTopic(want, have)
	t.topic = &have
	if !plan.Empty() {
		recreated := plan.Create && wasOwned
		if recreated {
			if err := r.forgetUnboundDecisions(ctx, dlq, spec, k, t.stateHave); err != nil {
				return kafkaProblem(err)
			}
		}
		now, err := kafka.ApplyPlan(ctx, k.admin, want, have, plan)
		t.topic = &now
		r.noteTopicChange(k.connKey, want.Name, now, plan, err)
		if err != nil {
			if errors.Is(err, kafka.ErrTopicExists) {
				// Created by someone else in between: look again at the next resync.
				return &problem{Reason: retryv1alpha1.ReasonReconciling, Kind: problemWaiting, Progress: true, Message: fmt.Sprintf("topic %q appeared while being created", want.Name)}
			}
			return kafkaProblem(err)
		}
		t.noteChange(ctx, dlq, want, have, plan, recreated)
		if plan.Create {
			// A new topic holds nothing: no need to ask Kafka.
			empty := make([]kafka.PartitionOffsets, want.Partitions)
			for i := range empty {
				empty[i].Partition = int32(i)
			}
			r.Kafka.Offsets.Set(k.connKey, want.Name, empty)
		}
	}
	ps.add(shrinkProblem("topic", want, plan, fmt.Sprintf("set spec.topic.partitions to %d to accept them", plan.ShrinkFrom)))
	return nil
}

// dlqSettled says the queue's topics were last found as its spec asks: the spec's generation is the
// one observed and Ready is True. Then its reconcile reads the connection's snapshot of topic
// descriptions; otherwise it describes its topics fresh.
func dlqSettled(dlq *retryv1alpha1.DeadLetterQueue) bool {
	c := meta.FindStatusCondition(dlq.Status.Conditions, retryv1alpha1.ConditionReady)
	return dlq.Status.ObservedGeneration == dlq.Generation && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == dlq.Generation
}

// takenTopic is a topic a queue takes as its own, as described.
type takenTopic struct {
	name string
	have kafka.TopicInfo
}

// takeTopics makes topics not yet in the ledger the queue's own: the first must be taken, the others
// are taken with it when they may be (their own phase reports why not). One is refused when it
// exists and the queue does not ask to adopt it, when the claim policy does not give the namespace
// its name, or when another resource's ledger record holds it (heldElsewhere), whether it exists
// or not; the others are recorded in the ledger, in one write, before they are created or adopted.
func (r *DeadLetterQueueReconciler) takeTopics(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, topics ...takenTopic) error {
	problems := make([]*problem, len(topics))
	var taking []string
	for i, t := range topics {
		if problems[i] = r.takeProblem(dlq, t.name, t.have); problems[i] == nil {
			taking = append(taking, t.name)
		}
	}
	if problems[0] == nil {
		held, err := r.heldElsewhere(ctx, dlq, taking)
		if err != nil {
			return err
		}
		for i, t := range topics {
			if problems[i] == nil {
				problems[i] = held[t.name]
			}
		}
	}
	if p := problems[0]; p != nil {
		if p.Reason == retryv1alpha1.ReasonTopicNotOwned || p.Reason == retryv1alpha1.ReasonTopicConflict {
			r.Kafka.Offsets.Forget(dlqOwner(client.ObjectKeyFromObject(dlq)))
		}
		return p
	}
	var names, adopted []string
	for i, t := range topics {
		if problems[i] != nil {
			continue
		}
		names = append(names, t.name)
		if t.have.Exists {
			adopted = append(adopted, t.name)
		}
	}
	if err := r.recordCreatedTopics(ctx, dlq, names...); err != nil {
		return err
	}
	for _, name := range adopted {
		ctrl.LoggerFrom(ctx).Info("Adopted topic", "deadLetterQueue", klog.KObj(dlq), "topic", name)
	}
	if len(adopted) > 0 {
		// One event: a second of the same reason would join its series and lose its note.
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventTopicAdopted, "ReconcileTopic", "Topic %s adopted (existingTopic Adopt)", strings.Join(adopted, " and "))
	}
	return nil
}

// heldElsewhere returns, of the topics the queue would create or adopt (names), the TopicConflict
// of each one that another resource's ledger record holds: a pipeline's source or retry tier, or a
// queue's topic or record of decisions. A record may hold a topic that does not exist: its resource
// records before it creates, and a topic may be deleted outside the operator. A queue whose own
// topic is this queue's is left to the claim phase (the oldest of the two has it). Neither creation
// nor adoption takes what another resource manages: both would reconfigure and trim it and, under
// deletionPolicy Delete, delete it under the other. It lists the whole ledger, so it runs only when
// the queue takes a topic.
func (r *DeadLetterQueueReconciler) heldElsewhere(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, names []string) (map[string]*problem, error) {
	holders, err := r.Ledger.HoldersOf(ctx, names...)
	if err != nil {
		return nil, err
	}
	out := map[string]*problem{}
	for _, name := range names {
		for _, h := range holders[name] {
			if h.Is("DeadLetterQueue", dlq.Namespace, dlq.Name) {
				continue
			}
			if h.Kind == "DeadLetterQueue" {
				// One that cannot be read (gone, its record not swept yet) may still be what the record says.
				o := &retryv1alpha1.DeadLetterQueue{}
				if r.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Name}, o) == nil && o.Spec.Topic.Name == dlq.Spec.Topic.Name {
					continue
				}
			}
			out[name] = &problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
				"topic %q is managed by %s (the operator's topic ledger holds it for that one): this queue neither creates nor adopts it "+
					"until that one lets it go, or name another topic", name, h), maxConditionMessage)}
			break
		}
	}
	return out, nil
}

// takeProblem says why the queue may not take name, described as have, as its own; nil when it may.
func (r *DeadLetterQueueReconciler) takeProblem(dlq *retryv1alpha1.DeadLetterQueue, name string, have kafka.TopicInfo) *problem {
	if have.Exists && dlq.Spec.Topic.ExistingTopic != retryv1alpha1.ExistingTopicAdopt {
		return &problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemUser, Message: fmt.Sprintf(
			"topic %q exists and the operator did not create it for this queue: it is left unchanged and its records are not read; "+
				"set spec.topic.existingTopic: Adopt to manage it (its configs, partitions, trimming and, under deletionPolicy Delete, its deletion), or name another topic", name)}
	}
	return r.claimProblem(dlq, name)
}

// reconcileStateTopic creates the queue's record of decisions (deadletters.StateTopic: compacted,
// one partition, beside the queue's topic), owned like the queue's topic, and keeps its configs. A
// queue whose topic name leaves no room for the suffix has none: actions on it are refused.
func (r *DeadLetterQueueReconciler) reconcileStateTopic(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, k *kafkaClient, t *dlqTopics, ps *problems) error {
	want, have := spec.stateWant, t.stateHave
	if want.Name == "" {
		ps.add(&problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: fmt.Sprintf(
			"topic name %q leaves no room for its record of decisions (%q appended, 249 characters at most): dead-letter actions cannot run on this queue; use a shorter name",
			spec.want.Name, deadletters.StateTopicSuffix)})
		return nil
	}
	owned, err := r.Ledger.Owns(ctx, dlq, want.Name)
	if err != nil {
		return err
	}
	if !owned {
		if err := r.takeTopics(ctx, dlq, takenTopic{want.Name, have}); err != nil {
			return err
		}
	}
	plan := kafka.PlanTopic(want, have)
	plan.ShrinkFrom = 0
	if !plan.Empty() {
		now, err := kafka.ApplyPlan(ctx, k.admin, want, have, plan)
		r.noteTopicChange(k.connKey, want.Name, now, plan, err)
		if err != nil {
			if errors.Is(err, kafka.ErrTopicExists) {
				return &problem{Reason: retryv1alpha1.ReasonReconciling, Kind: problemWaiting, Progress: true, Message: fmt.Sprintf("topic %q appeared while being created", want.Name)}
			}
			return kafkaProblem(err)
		}
		t.noteChange(ctx, dlq, want, have, plan, false)
	}
	t.stateTopic = want.Name
	return nil
}

// stateTopicSpec is the record of decisions of a queue: one partition (its records are read whole),
// the queue's replication factor, compacted. Its name is empty when the queue's is too long for it.
func stateTopicSpec(want kafka.TopicSpec) kafka.TopicSpec {
	name, ok := deadletters.StateTopic(want.Name)
	if !ok {
		return kafka.TopicSpec{}
	}
	return kafka.TopicSpec{Name: name, Partitions: 1, ReplicationFactor: want.ReplicationFactor, Configs: deadletters.StateTopicConfigs()}
}

// noteChange logs a change made in Kafka and keeps it for the reconcile's event; recreated says the
// operator had created the topic before (it was deleted out of band).
func (t *dlqTopics) noteChange(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, want kafka.TopicSpec, have kafka.TopicInfo, plan kafka.TopicPlan, recreated bool) {
	what := plan.Describe(want, have)
	reason := eventTopicCorrected
	switch {
	case recreated:
		reason = eventTopicRecreated
		what = "recreated (it had been deleted out of band) with " + strconv.Itoa(int(want.Partitions)) + " partitions"
	case plan.Create:
		reason = eventTopicCreated
	}
	ctrl.LoggerFrom(ctx).Info("Reconciled topic", "deadLetterQueue", klog.KObj(dlq), "topic", want.Name, "change", what)
	t.changes = append(t.changes, "Topic "+want.Name+" "+what)
	// The event takes the weightiest reason: a recreation over a creation over a correction.
	if t.changeReason == "" || t.changeReason == eventTopicCorrected || reason == eventTopicRecreated {
		t.changeReason = reason
	}
}

// recordTopicChanges records one event for the changes a reconcile made to the queue's topic and
// its record of decisions (the events API keeps only the first note of a series of one reason).
func (r *DeadLetterQueueReconciler) recordTopicChanges(dlq *retryv1alpha1.DeadLetterQueue, t dlqTopics) {
	if len(t.changes) == 0 {
		return
	}
	r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, t.changeReason, "ReconcileTopic", "%s", truncate(strings.Join(t.changes, "; "), maxConditionMessage))
}

// dlqOffsets is what the offsets phase read.
type dlqOffsets struct {
	// counted is set when the offsets were read this reconcile; offsets are then the topic's, read
	// at at (and trimmed to retention.maxMessages), and stateOffsets the record of decisions'.
	counted      bool
	offsets      []kafka.PartitionOffsets
	at           time.Time
	stateOffsets []kafka.PartitionOffsets
}

// readOffsets reads the offsets of the topic and of its record of decisions (once it exists as
// specified) through the batched reads.
func (r *DeadLetterQueueReconciler) readOffsets(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, t dlqTopics, k *kafkaClient) (dlqOffsets, error) {
	topics := []string{spec.want.Name}
	if t.stateTopic != "" {
		topics = append(topics, t.stateTopic)
	}
	got, at, err := r.Kafka.Offsets.Get(ctx, k.admin, k.connKey, dlqOwner(client.ObjectKeyFromObject(dlq)), topics, spec.interval)
	if err != nil {
		return dlqOffsets{}, kafkaProblem(err)
	}
	return dlqOffsets{counted: true, offsets: got[spec.want.Name], at: at, stateOffsets: got[t.stateTopic]}, nil
}

// enforceMaxMessages deletes the oldest records when the topic holds more than
// spec.retention.maxMessages (see trimPlan for how the deletion is spread over partitions), and
// moves o's start offsets past them.
func (r *DeadLetterQueueReconciler) enforceMaxMessages(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, k *kafkaClient, o *dlqOffsets) error {
	ret := dlq.Spec.Retention
	if ret == nil || ret.MaxMessages == nil || !o.counted {
		return nil
	}
	before := trimPlan(o.offsets, *ret.MaxMessages)
	if len(before) == 0 {
		return nil
	}
	held := kafkastats.CountMessages(o.offsets)
	if err := k.admin.DeleteRecordsBefore(ctx, spec.want.Name, before); err != nil {
		return kafkaProblem(err)
	}
	for i := range o.offsets {
		if b, ok := before[o.offsets[i].Partition]; ok {
			o.offsets[i].Start = b
		}
	}
	r.Kafka.Offsets.Set(k.connKey, spec.want.Name, o.offsets)
	left := kafkastats.CountMessages(o.offsets)
	ctrl.LoggerFrom(ctx).Info("Trimmed dead letters", "deadLetterQueue", klog.KObj(dlq), "topic", spec.want.Name, "deleted", held-left, "left", left)
	r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, eventRecordsTrimmed, "EnforceRetention",
		"Deleted the %d oldest dead letters of topic %s to keep retention.maxMessages %d", held-left, spec.want.Name, *ret.MaxMessages)
	return nil
}

// dlqTopicSpec is the topic a queue asks for. retention.maxAge becomes the topic's retention.ms.
func dlqTopicSpec(dlq *retryv1alpha1.DeadLetterQueue) kafka.TopicSpec {
	t := dlq.Spec.Topic
	want := kafka.TopicSpec{Name: string(t.Name), Partitions: t.Partitions, ReplicationFactor: -1, Configs: map[string]string{}}
	if want.Partitions == 0 {
		want.Partitions = 3
	}
	if t.ReplicationFactor != nil {
		want.ReplicationFactor = int16(*t.ReplicationFactor)
	}
	for k, v := range t.Config {
		want.Configs[k] = v
	}
	if ret := dlq.Spec.Retention; ret != nil && ret.MaxAge != nil {
		want.Configs["retention.ms"] = strconv.FormatInt(ret.MaxAge.Milliseconds(), 10)
	}
	return want
}

// trimPlan returns, per partition, the offset before which records must be deleted so that the topic
// holds maxMessages records, or nil when it holds no more than that.
//
// Record timestamps are not read (that would mean fetching every partition's head), so the age order
// across partitions is unknown. The excess is spread over the partitions in proportion to what each
// holds, by the largest-remainder method so the total is exact: with keys spread evenly by the
// partitioner, records at the same relative position of each partition are about the same age, and
// this deletes about the oldest ones. Within a partition the deletion is always of the oldest.
func trimPlan(offsets []kafka.PartitionOffsets, maxMessages int64) map[int32]int64 {
	total := kafkastats.CountMessages(offsets)
	excess := total - maxMessages
	if maxMessages < 0 || excess <= 0 {
		return nil
	}
	type share struct {
		i         int
		held, cut int64
		rem       int64 // remainder of the proportional share, scaled by total
	}
	shares := make([]share, 0, len(offsets))
	var assigned int64
	for i := range offsets {
		held := kafkastats.CountMessages(offsets[i : i+1])
		if held == 0 {
			continue
		}
		// excess*held/total in 128 bits: excess < total, so the quotient fits.
		hi, lo := bits.Mul64(uint64(excess), uint64(held))
		cut, rem := bits.Div64(hi, lo, uint64(total))
		shares = append(shares, share{i: i, held: held, cut: int64(cut), rem: int64(rem)})
		assigned += int64(cut)
	}
	// Hand out what rounding down left, largest remainder first, then lowest partition.
	sort.SliceStable(shares, func(a, b int) bool {
		if shares[a].rem != shares[b].rem {
			return shares[a].rem > shares[b].rem
		}
		return offsets[shares[a].i].Partition < offsets[shares[b].i].Partition
	})
	for k := 0; assigned < excess; k = (k + 1) % len(shares) {
		if shares[k].cut < shares[k].held {
			shares[k].cut++
			assigned++
		}
	}
	out := make(map[int32]int64, len(shares))
	for _, sh := range shares {
		if sh.cut > 0 {
			o := offsets[sh.i]
			out[o.Partition] = o.Start + sh.cut
		}
	}
	return out
}
