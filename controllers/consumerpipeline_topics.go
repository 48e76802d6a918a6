package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/retry"
)

// defaultSourcePartitions is spec.source.create.partitions when absent (the API server defaults it
// too).
const defaultSourcePartitions = 3

// retryTiers names the retry tiers of a plan under the pipeline's base (tierBase, such as
// shop.billing). It is the dispatcher's own naming (dispatchercfg.BuildTiers), so that the topics
// the operator makes are the ones the consumers read:
//   - ByAttempt: one tier per retry, <base>.retry.<n> (shop.billing.retry.1, ...);
//   - ByDelay: consecutive retries with identical windows share a tier, as Spring Kafka reuses its
//     last topic, named <base>.retry.<delay> (shop.billing.retry.10s, shop.billing.retry.1.5s).
//     Two shared tiers can have the same nominal delay but different windows (proportional jitter
//     capped after it); the later one gets the suffix -<tier index> (shop.billing.retry.4s-3) so
//     that names stay unique.
func retryTiers(base string, naming retryv1alpha1.RetryTopicNaming, plan retry.Plan) dispatchercfg.Tiers {
	if naming == "" {
		naming = retryv1alpha1.NamingByAttempt
	}
	return dispatchercfg.BuildTiers(base, dispatchercfg.RetryTopicNaming(naming), plan)
}

// retryDeletionPolicy is spec.retryTopics.deletionPolicy, Retain when absent.
func retryDeletionPolicy(p *retryv1alpha1.ConsumerPipeline) retryv1alpha1.DeletionPolicy {
	if p.Spec.RetryTopics == nil || p.Spec.RetryTopics.DeletionPolicy == "" {
		return retryv1alpha1.DeletionPolicyRetain
	}
	return p.Spec.RetryTopics.DeletionPolicy
}

// consumerGroup is spec.source.consumerGroup or its default, <namespace>.<name>.
func consumerGroup(p *retryv1alpha1.ConsumerPipeline) string {
	if g := p.Spec.Source.ConsumerGroup; g != "" {
		return g
	}
	return p.Namespace + "." + p.Name
}

// createdTiers lists the retry tiers the operator created for a pipeline (in use and unused): the
// topics the ledger records for it (owned) but the source.
func createdTiers(p *retryv1alpha1.ConsumerPipeline, owned []string) []string {
	return slices.DeleteFunc(slices.Clone(owned), func(n string) bool { return n == string(p.Spec.Source.Topic) })
}

// pipelineTopics is what the topics phase found and did in Kafka. It starts from the previous
// status (topicsFromStatus), so that what the phase could not find out this time keeps its value.
type pipelineTopics struct {
	// sourcePartitions is the source topic's partition count; 0 when it does not exist, or when
	// the pipeline's claim is refused.
	sourcePartitions int32
	// retries are the plan's tiers with their delays and partitions.
	retries []retryv1alpha1.RetryTopicStatus
	// unused are the tiers the pipeline created that the plan no longer needs and that are not
	// deleted (consumerpipeline_draining.go).
	unused []string
	// draining are the unused tiers the dispatchers consume until the consumer group has consumed
	// them to the end, sorted. drainingKnown is false when the phase could not find them out: then
	// draining is the previous status's, and the children keep draining every unused tier the
	// applied config consumed (keptDraining).
	draining      []string
	drainingKnown bool
	// awaitingRollout is set when a drained unused tier is kept, under Delete, until the consumer
	// Deployment has rolled out a config that no longer writes to it (consumersHold).
	awaitingRollout bool
	// owned are the topics the ledger records for the pipeline once the phase has recorded those it
	// creates or adopts, sorted.
	owned []string
	// refused is the TopicConflict of a topic another resource's ledger record holds
	// (heldElsewhere): it ends the phases as a refused claim does.
	refused *problem
	// changes are the changes made in Kafka, for one event (recordTopicChanges); created is set
	// when a topic was created.
	changes []string
	created bool
}

// topicsFromStatus is the topics as the previous status has them, owned as the claims phase found.
func topicsFromStatus(p *retryv1alpha1.ConsumerPipeline, owned []string) pipelineTopics {
	t := pipelineTopics{owned: owned}
	if st := p.Status.Topics; st != nil {
		t.sourcePartitions = st.SourcePartitions
		t.retries = slices.Clone(st.Retries)
		t.unused = slices.Clone(st.UnusedRetries)
		t.draining = slices.Clone(st.DrainingRetries)
	}
	return t
}

// previousDraining are the draining tiers of the previous status.
func previousDraining(p *retryv1alpha1.ConsumerPipeline) []string {
	if p.Status.Topics == nil {
		return nil
	}
	return p.Status.Topics.DrainingRetries
}

// withhold zeroes the figures of a pipeline whose claim is refused: they would be another's.
func (t *pipelineTopics) withhold() {
	t.sourcePartitions = 0
	for i := range t.retries {
		t.retries[i].Partitions, t.retries[i].Backlog = 0, 0
	}
}

// largestPartitions is the partition count of the pipeline's largest topic (the source and the
// retry tiers it consumes): more consumers than that leave some with nothing to read. 0 when unknown.
func (t pipelineTopics) largestPartitions() int32 {
	n := t.sourcePartitions
	for _, rt := range t.retries {
		n = max(n, rt.Partitions)
	}
	return n
}

// topics is the third phase: it describes the source and the retry tiers, records in the ledger
// those the pipeline is about to create or adopt, creates or corrects them, and finds out which
// unused tiers drain, deleting the drained ones under deletionPolicy Delete. A problem that does not
// stop the next step is recorded in ps; one that does ends the phases.
func (r *ConsumerPipelineReconciler) topics(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, claim pipelineClaim, conn *pipelineConnection, ps *problems) (pipelineTopics, error) {
	t := topicsFromStatus(p, claim.owned)
	k, err := conn.get(ctx)
	if err != nil {
		return t, named("Connection", err)
	}
	described, err := r.describeTopics(ctx, p, refs, claim.blocked, k)
	if err != nil {
		return t, named("DescribeTopics", err)
	}
	owned, conflict, err := r.recordNewTopics(ctx, p, refs, claim, described)
	if conflict != nil {
		conflict.Message = truncate(conflict.Message, maxConditionMessage)
		t.refused = conflict
		t.withhold()
		r.forgetFigures(client.ObjectKeyFromObject(p))
		return t, conflict
	}
	if err != nil {
		return t, named("RecordTopics", err)
	}
	t.owned = owned
	if err := r.reconcileSourceTopic(ctx, p, claim, described, k, &t, ps); err != nil {
		return t, named("SourceTopic", err)
	}
	if err := r.reconcileRetryTopics(ctx, p, refs, claim.blocked, described, k, &t, ps); err != nil {
		return t, named("RetryTopics", err)
	}
	return t, named("UnusedRetryTopics", r.reconcileUnusedRetryTopics(ctx, p, refs, claim.blocked, k, &t, ps))
}

// describeTopics describes the source and the retry tiers (but the blocked ones) in one call.
func (r *ConsumerPipelineReconciler) describeTopics(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, blocked map[string]bool, k *kafkaClient) (map[string]kafka.TopicInfo, error) {
	names := []string{string(p.Spec.Source.Topic)}
	for _, t := range refs.tiers {
		if !blocked[t.Name] {
			names = append(names, t.Name)
		}
	}
	got, err := r.Kafka.Topics.Describe(ctx, k.admin, k.connKey, pipelineOwner(client.ObjectKeyFromObject(p)), names, r.RefreshInterval, pipelineTopicsSettled(p))
	if err != nil {
		return nil, kafkaProblem(err)
	}
	k.readClusterID(ctx)
	return got, nil
}

// pipelineTopicsSettled says the pipeline's topics were last found as its spec asks: the spec's
// generation is the one observed and TopicsReady is True. Then its reconcile reads the connection's
// snapshot of topic descriptions; otherwise it describes its topics fresh.
func pipelineTopicsSettled(p *retryv1alpha1.ConsumerPipeline) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady)
	return p.Status.ObservedGeneration == p.Generation && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == p.Generation
}

// noteTopicChange puts what a reconcile changed in Kafka (ApplyPlan's now and err) into the
// connection's snapshot of topic descriptions, so that the reconciles reading it after see the
// change rather than set it again. A created topic, or one whose change failed half way, is dropped
// from the snapshot instead: its next reader describes it alone (the brokers know its ID and
// replication factor, and what the failure left).
func (r *topicReconciler) noteTopicChange(connKey, name string, now kafka.TopicInfo, plan kafka.TopicPlan, err error) {
	if plan.Create || err != nil {
		r.Kafka.Topics.Drop(connKey, name)
		return
	}
	r.Kafka.Topics.Set(connKey, now)
}

// recordNewTopics records in the topic ledger the topics the next steps are about to create or
// adopt, all in one write, before any is created. Each must be one the manager's claim policy gives
// the namespace. An existing retry tier the operator did not create is someone else's topic: the
// pipeline stops there (TopicNotOwned) unless spec.source.create.existingTopic is Adopt, rather
// than reconfigure it and mix its records with retries. Nothing is created or adopted that another
// resource's ledger record holds (heldElsewhere), whether it exists or not: the pipeline stops with
// TopicConflict, as for a tier base another pipeline has.
func (r *ConsumerPipelineReconciler) recordNewTopics(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, claim pipelineClaim, described map[string]kafka.TopicInfo) (owned []string, conflict *problem, err error) {
	var names []string
	sourceName := string(p.Spec.Source.Topic)
	source := described[sourceName]
	sourcePartitions := source.Partitions
	var takenSource string
	if want, managed := sourceSpec(p, claim, claim.owned, described); managed && !slices.Contains(claim.owned, sourceName) {
		names = append(names, want.Name)
		takenSource = sourceName
		if !source.Exists {
			sourcePartitions = want.Partitions
		}
	}
	adopt := p.Spec.Source.Create != nil && p.Spec.Source.Create.ExistingTopic == retryv1alpha1.ExistingTopicAdopt
	// taken are the tiers the pipeline did not create that it would create, adopt, or report as
	// foreign (someone else's, existing, without Adopt): another record may hold one that does not
	// exist (recorded, not created yet; or deleted outside the operator) as well as one that does.
	var taken, foreign []string
	if want, _ := tierSpec(p, sourcePartitions); refs.planKnown() && want.Partitions > 0 {
		for _, t := range refs.tiers {
			switch {
			case claim.blocked[t.Name] || slices.Contains(claim.owned, t.Name):
				continue
			case !described[t.Name].Exists || adopt:
				names = append(names, t.Name)
			default:
				foreign = append(foreign, t.Name)
			}
			taken = append(taken, t.Name)
		}
	}
	// The claim policy first: its refusal is of the spec, for good.
	for _, name := range names {
		if pr := r.claimProblem(p, name); pr != nil {
			return claim.owned, nil, pr
		}
	}
	if conflict, err := r.heldElsewhere(ctx, p, takenSource, taken); conflict != nil || err != nil {
		return claim.owned, conflict, err
	}
	if len(foreign) > 0 {
		return claim.owned, nil, &problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemUser, Message: truncate(fmt.Sprintf(
			"retry topics %s exist and the operator did not create them for this pipeline: they are left unchanged and the pipeline does not run on them; "+
				"delete them, or set spec.source.create.existingTopic: Adopt to manage them", strings.Join(foreign, ", ")), maxConditionMessage)}
	}
	if len(names) == 0 {
		return claim.owned, nil, nil
	}
	if err := r.recordCreatedTopics(ctx, p, names...); err != nil {
		return claim.owned, nil, err
	}
	owned, _ = r.ownedTopics(ctx, p)
	return owned, nil, nil
}

// sourceSpec is the source topic as spec.source.create describes it, and whether the pipeline
// manages it: it asks to, no other pipeline on the source manages it (findSourceOwner), no queue
// claims the topic, and the topic is missing, was created for this pipeline or is adopted
// (create.existingTopic Adopt).
func sourceSpec(p *retryv1alpha1.ConsumerPipeline, claim pipelineClaim, owned []string, described map[string]kafka.TopicInfo) (kafka.TopicSpec, bool) {
	source := string(p.Spec.Source.Topic)
	create := p.Spec.Source.Create
	if create == nil || !claim.managesSource || claim.blocked[source] {
		return kafka.TopicSpec{}, false
	}
	if described[source].Exists && create.ExistingTopic != retryv1alpha1.ExistingTopicAdopt && !slices.Contains(owned, source) {
		return kafka.TopicSpec{}, false
	}
	want := kafka.TopicSpec{Name: source, Partitions: create.Partitions, ReplicationFactor: -1, Configs: create.Config}
	if want.Partitions == 0 {
		want.Partitions = defaultSourcePartitions
	}
	if create.ReplicationFactor != nil {
		want.ReplicationFactor = int16(*create.ReplicationFactor)
	}
	return want, true
}

// tierSpec is a retry tier as spec.retryTopics describes it, nameless: as many partitions as the
// source (sourcePartitions) unless retryTopics.partitions says otherwise; fix says how to accept
// more partitions than that.
func tierSpec(p *retryv1alpha1.ConsumerPipeline, sourcePartitions int32) (want kafka.TopicSpec, fix string) {
	rt := p.Spec.RetryTopics
	want = kafka.TopicSpec{Partitions: sourcePartitions, ReplicationFactor: -1}
	fix = "set spec.retryTopics.partitions to at least that to accept them"
	if rt != nil && rt.Partitions != nil {
		want.Partitions = *rt.Partitions
		fix = "raise spec.retryTopics.partitions to accept them"
	}
	if rt != nil && rt.ReplicationFactor != nil {
		want.ReplicationFactor = int16(*rt.ReplicationFactor)
	}
	return want, fix
}

// reconcileSourceTopic checks the source topic, or creates it and keeps its partitions and configs
// when spec.source.create is given. More partitions than create.partitions is fine for a source
// (the topic may predate the pipeline): the operator only ever grows it.
func (r *ConsumerPipelineReconciler) reconcileSourceTopic(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, claim pipelineClaim, described map[string]kafka.TopicInfo, k *kafkaClient, t *pipelineTopics, ps *problems) error {
	source := string(p.Spec.Source.Topic)
	have := described[source]
	want, managed := sourceSpec(p, claim, t.owned, described)
	if !managed {
		if !have.Exists {
			t.sourcePartitions = 0
			msg := fmt.Sprintf("source topic %q does not exist; create it, or set spec.source.create to have the operator create it", source)
			if claim.sourceOwner != "" {
				msg = fmt.Sprintf("source topic %q does not exist yet; %s creates it (it recorded the topic first)", source, claim.sourceOwner)
			}
			ps.add(&problem{Reason: retryv1alpha1.ReasonSourceTopicMissing, Kind: problemWaiting, Message: msg})
			return nil
		}
		t.sourcePartitions = have.Partitions
		return nil
	}
	plan := kafka.PlanTopic(want, have)
	plan.ShrinkFrom = 0
	if plan.Empty() {
		t.sourcePartitions = have.Partitions
		return nil
	}
	now, err := kafka.ApplyPlan(ctx, k.admin, want, have, plan)
	r.noteTopicChange(k.connKey, want.Name, now, plan, err)
	if err != nil {
		if errors.Is(err, kafka.ErrTopicExists) {
			return &problem{Reason: retryv1alpha1.ReasonReconciling, Kind: problemWaiting, Progress: true, Message: fmt.Sprintf("source topic %q appeared while being created", source)}
		}
		return kafkaProblem(err)
	}
	t.sourcePartitions = now.Partitions
	t.noteChange(ctx, p, "Source topic", want, have, plan)
	return nil
}

// reconcileRetryTopics creates the retry tiers the plan needs and keeps their partitions. Tiers
// have as many partitions as the source unless retryTopics.partitions says otherwise.
func (r *ConsumerPipelineReconciler) reconcileRetryTopics(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, blocked map[string]bool, described map[string]kafka.TopicInfo, k *kafkaClient, t *pipelineTopics, ps *problems) error {
	if !refs.planKnown() {
		return nil
	}
	prev := map[string]int32{}
	for _, rt := range t.retries {
		prev[rt.Name] = rt.Partitions
	}
	t.retries = make([]retryv1alpha1.RetryTopicStatus, 0, len(refs.tiers))
	for _, tier := range refs.tiers {
		t.retries = append(t.retries, retryv1alpha1.RetryTopicStatus{Name: tier.Name, Delay: metav1.Duration{Duration: tier.Delay.Duration}, Partitions: prev[tier.Name]})
	}
	want, fix := tierSpec(p, t.sourcePartitions)
	if want.Partitions <= 0 {
		// The source is missing (already reported): nothing to size the tiers by.
		return nil
	}
	var errs []*problem
	for i := range t.retries {
		name := t.retries[i].Name
		if blocked[name] {
			continue
		}
		want.Name = name
		have := described[name]
		plan := kafka.PlanTopic(want, have)
		t.retries[i].Partitions = have.Partitions
		if !plan.Empty() {
			now, err := kafka.ApplyPlan(ctx, k.admin, want, have, plan)
			r.noteTopicChange(k.connKey, want.Name, now, plan, err)
			if err != nil {
				if !errors.Is(err, kafka.ErrTopicExists) {
					errs = append(errs, kafkaProblem(err))
				}
				continue
			}
			t.retries[i].Partitions = now.Partitions
			t.noteChange(ctx, p, "Retry topic", want, have, plan)
		}
		ps.add(shrinkProblem("retry topic", want, plan, fix))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// noteChange logs a change made in Kafka and keeps it for the reconcile's event.
func (t *pipelineTopics) noteChange(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, what string, want kafka.TopicSpec, have kafka.TopicInfo, plan kafka.TopicPlan) {
	change := plan.Describe(want, have)
	ctrl.LoggerFrom(ctx).Info("Reconciled topic", "consumerPipeline", klog.KObj(p), "topic", want.Name, "change", change)
	t.changes = append(t.changes, fmt.Sprintf("%s %s %s", what, want.Name, change))
	t.created = t.created || plan.Create
}

// recordTopicChanges emits one event for all the changes a reconcile made: the events API folds
// events of one reason about one object into a series that keeps only the first note, so one event
// per topic would lose all but the first.
func (r *ConsumerPipelineReconciler) recordTopicChanges(p *retryv1alpha1.ConsumerPipeline, t pipelineTopics) {
	if len(t.changes) == 0 {
		return
	}
	reason := eventTopicCorrected
	if t.created {
		reason = eventTopicCreated
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, reason, "ReconcileTopics", "%s", truncate(strings.Join(t.changes, "; "), maxConditionMessage))
}

// deleteTiers deletes the named retry tiers, skipping any a DeadLetterQueue claims (blocked).
func (r *ConsumerPipelineReconciler) deleteTiers(ctx context.Context, conn *pipelineConnection, blocked map[string]bool, tiers []string) error {
	k, err := conn.get(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tiers {
		if blocked[t] {
			continue
		}
		if err := k.admin.DeleteTopic(ctx, t); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Kafka.Topics.Set(k.connKey, kafka.TopicInfo{Name: t})
	}
	return errors.Join(errs...)
}
