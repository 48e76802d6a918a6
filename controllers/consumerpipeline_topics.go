package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// readPolicy computes the retry tiers from the referenced RetryPolicy. A missing or invalid policy
// is reported and leaves the tiers in status as they were: nothing is created or removed until the
// plan is known again.
func (r *ConsumerPipelineReconciler) readPolicy(ctx context.Context, s *pipelineScope) error {
	name := s.p.Spec.RetryPolicyRef.Name
	rp := &retryv1alpha1.RetryPolicy{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: s.p.Namespace, Name: name}, rp); err != nil {
		if apierrors.IsNotFound(err) {
			s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true,
				Message: fmt.Sprintf("RetryPolicy %q not found: the retry topics are left as they are until it exists", name)})
			return nil
		}
		return err
	}
	compiled, err := compilePolicy(r.Policies, rp)
	if err != nil {
		s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemWaiting,
			Message: truncate(fmt.Sprintf("RetryPolicy %q is invalid, the retry topics are left as they are: %v", name, err), maxConditionMessage)})
		return nil
	}
	naming := retryv1alpha1.NamingByAttempt
	if rt := s.p.Spec.RetryTopics; rt != nil && rt.Naming != "" {
		naming = rt.Naming
	}
	s.tiers, s.planKnown = retryTiers(tierBase(s.p, r.Kafka.Defaults), naming, compiled.Plan()), true
	s.policy = rp
	return nil
}

// readDeadLetterQueue reads the referenced queue's topic. The queue's own controller manages that
// topic, on the queue's connection.
func (r *ConsumerPipelineReconciler) readDeadLetterQueue(ctx context.Context, s *pipelineScope) error {
	name := s.p.Spec.DeadLetterQueueRef.Name
	dlq := &retryv1alpha1.DeadLetterQueue{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: s.p.Namespace, Name: name}, dlq); err != nil {
		if apierrors.IsNotFound(err) {
			s.deadLetter = ""
			s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Progress: true,
				Message: fmt.Sprintf("DeadLetterQueue %q not found", name)})
			return nil
		}
		return err
	}
	s.deadLetter = string(dlq.Spec.Topic.Name)
	// Nor to one the claim policy gives another namespace, whatever the ledger recorded before it.
	if p := r.claimProblem(dlq, s.deadLetter); p != nil {
		s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonTopicClaimRefused, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
			"DeadLetterQueue %q: %s; no dead letters are sent there", name, p.Message), maxConditionMessage)})
		return nil //nolint:nilerr // the refusal is the pipeline's topic problem, reported in its conditions
	}
	// Dead letters go only to a topic the queue manages (created or adopted): never, with the
	// operator's credentials, to a topic of someone else's that a queue merely names.
	owned, err := r.Ledger.Owns(ctx, dlq, s.deadLetter)
	if err != nil {
		return err
	}
	if !owned {
		s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemWaiting, Progress: true, Message: fmt.Sprintf(
			"DeadLetterQueue %q does not manage its topic %q yet (see its TopicReady condition): no dead letters are sent there until it does", name, s.deadLetter)})
		return nil
	}
	s.queue = dlq
	return nil
}

// checkClaims finds out which topics this pipeline may manage: its own retry tiers, and its source
// when it asks to create it and no other pipeline on the source manages it (findSourceOwner). A
// topic a DeadLetterQueue claims is never managed by a pipeline.
func (r *ConsumerPipelineReconciler) checkClaims(ctx context.Context, s *pipelineScope) error {
	p := s.p
	source := string(p.Spec.Source.Topic)
	owned, err := r.ownedTopics(ctx, p)
	if err != nil {
		return err
	}
	s.owned = owned
	if err := r.findSourceOwner(ctx, s); err != nil {
		return err
	}

	names := createdTiers(p, s.owned)
	for _, t := range s.tiers {
		names = append(names, t.Name)
	}
	if p.Spec.Source.Create != nil {
		names = append(names, source)
	}
	slices.Sort(names)
	self := r.selfParty(s)
	for _, name := range slices.Compact(names) {
		dlqs, err := r.queuesClaiming(ctx, s, self, name)
		if err != nil {
			return err
		}
		if len(dlqs) == 0 {
			continue
		}
		s.blocked[name] = true
		if slices.ContainsFunc(s.tiers, func(t dispatchercfg.RetryTier) bool { return t.Name == name }) || name == source {
			s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: fmt.Sprintf(
				"topic %q is the dead letter topic of DeadLetterQueue %s/%s; this pipeline leaves it alone",
				name, dlqs[0].Namespace, dlqs[0].Name)})
		}
	}
	return nil
}

// connectPipeline resolves spec.kafka and gets a client.
func (r *ConsumerPipelineReconciler) connectPipeline(ctx context.Context, s *pipelineScope) error {
	return r.connect(ctx, &s.kafkaClient, pipelineOwner(client.ObjectKeyFromObject(s.p)), s.p.Namespace, s.p.Spec.Kafka)
}

// describeTopics describes the source and the retry tiers in one call.
func (r *ConsumerPipelineReconciler) describeTopics(ctx context.Context, s *pipelineScope) error {
	names := []string{string(s.p.Spec.Source.Topic)}
	for _, t := range s.tiers {
		if !s.blocked[t.Name] {
			names = append(names, t.Name)
		}
	}
	got, err := r.Kafka.Topics.Describe(ctx, s.admin, s.connKey, pipelineOwner(client.ObjectKeyFromObject(s.p)), names, r.RefreshInterval, pipelineTopicsSettled(s.p))
	if err != nil {
		return kafkaProblem(err)
	}
	s.described = got
	s.readClusterID(ctx)
	return nil
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
func (r *ConsumerPipelineReconciler) recordNewTopics(ctx context.Context, s *pipelineScope) error {
	var names []string
	sourceName := string(s.p.Spec.Source.Topic)
	source := s.described[sourceName]
	sourcePartitions := source.Partitions
	var takenSource string
	if want, managed := sourceSpec(s); managed && !slices.Contains(s.owned, sourceName) {
		names = append(names, want.Name)
		takenSource = sourceName
		if !source.Exists {
			sourcePartitions = want.Partitions
		}
	}
	adopt := s.p.Spec.Source.Create != nil && s.p.Spec.Source.Create.ExistingTopic == retryv1alpha1.ExistingTopicAdopt
	// taken are the tiers the pipeline did not create that it would create, adopt, or report as
	// foreign (someone else's, existing, without Adopt): another record may hold one that does not
	// exist (recorded, not created yet; or deleted outside the operator) as well as one that does.
	var taken, foreign []string
	if want, _ := tierSpec(s.p, sourcePartitions); s.planKnown && want.Partitions > 0 {
		for _, t := range s.tiers {
			switch {
			case s.blocked[t.Name] || slices.Contains(s.owned, t.Name):
				continue
			case !s.described[t.Name].Exists || adopt:
				names = append(names, t.Name)
			default:
				foreign = append(foreign, t.Name)
			}
			taken = append(taken, t.Name)
		}
	}
	// The claim policy first: its refusal is of the spec, for good.
	for _, name := range names {
		if p := r.claimProblem(s.p, name); p != nil {
			return p
		}
	}
	conflict, err := r.heldElsewhere(ctx, s, takenSource, taken)
	if err != nil {
		return err
	}
	if conflict != nil {
		return r.refuse(s, conflict)
	}
	if len(foreign) > 0 {
		return &problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemUser, Message: truncate(fmt.Sprintf(
			"retry topics %s exist and the operator did not create them for this pipeline: they are left unchanged and the pipeline does not run on them; "+
				"delete them, or set spec.source.create.existingTopic: Adopt to manage them", strings.Join(foreign, ", ")), maxConditionMessage)}
	}
	if len(names) == 0 {
		return nil
	}
	if err := r.recordCreatedTopics(ctx, s.p, names...); err != nil {
		return err
	}
	s.owned, _ = r.ownedTopics(ctx, s.p)
	return nil
}

// sourceSpec is the source topic as spec.source.create describes it, and whether the pipeline
// manages it: it asks to, no other pipeline on the source manages it (findSourceOwner), no queue
// claims the topic, and the topic is missing, was created for this pipeline or is adopted
// (create.existingTopic Adopt).
func sourceSpec(s *pipelineScope) (kafka.TopicSpec, bool) {
	source := string(s.p.Spec.Source.Topic)
	create := s.p.Spec.Source.Create
	if create == nil || !s.managesSource || s.blocked[source] {
		return kafka.TopicSpec{}, false
	}
	if s.described[source].Exists && create.ExistingTopic != retryv1alpha1.ExistingTopicAdopt && !slices.Contains(s.owned, source) {
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
func (r *ConsumerPipelineReconciler) reconcileSourceTopic(ctx context.Context, s *pipelineScope) error {
	source := string(s.p.Spec.Source.Topic)
	have := s.described[source]
	want, managed := sourceSpec(s)
	if !managed {
		if !have.Exists {
			s.sourcePartitions = 0
			msg := fmt.Sprintf("source topic %q does not exist; create it, or set spec.source.create to have the operator create it", source)
			if s.sourceOwner != "" {
				msg = fmt.Sprintf("source topic %q does not exist yet; %s creates it (it recorded the topic first)", source, s.sourceOwner)
			}
			s.topicProblems.add(&problem{Reason: retryv1alpha1.ReasonSourceTopicMissing, Kind: problemWaiting, Message: msg})
			return nil
		}
		s.sourcePartitions = have.Partitions
		return nil
	}
	plan := kafka.PlanTopic(want, have)
	plan.ShrinkFrom = 0
	if plan.Empty() {
		s.sourcePartitions = have.Partitions
		return nil
	}
	now, err := kafka.ApplyPlan(ctx, s.admin, want, have, plan)
	r.noteTopicChange(s.connKey, want.Name, now, plan, err)
	if err != nil {
		if errors.Is(err, kafka.ErrTopicExists) {
			return &problem{Reason: retryv1alpha1.ReasonReconciling, Kind: problemWaiting, Progress: true, Message: fmt.Sprintf("source topic %q appeared while being created", source)}
		}
		return kafkaProblem(err)
	}
	s.sourcePartitions = now.Partitions
	r.recordTopicChange(ctx, s, "Source topic", want, have, plan)
	return nil
}

// reconcileRetryTopics creates the retry tiers the plan needs and keeps their partitions. Tiers
// have as many partitions as the source unless retryTopics.partitions says otherwise.
func (r *ConsumerPipelineReconciler) reconcileRetryTopics(ctx context.Context, s *pipelineScope) error {
	if !s.planKnown {
		return nil
	}
	prev := map[string]int32{}
	for _, t := range s.retries {
		prev[t.Name] = t.Partitions
	}
	s.retries = make([]retryv1alpha1.RetryTopicStatus, 0, len(s.tiers))
	for _, t := range s.tiers {
		s.retries = append(s.retries, retryv1alpha1.RetryTopicStatus{Name: t.Name, Delay: metav1.Duration{Duration: t.Delay.Duration}, Partitions: prev[t.Name]})
	}
	want, fix := tierSpec(s.p, s.sourcePartitions)
	if want.Partitions <= 0 {
		// The source is missing (already reported): nothing to size the tiers by.
		return nil
	}
	var errs []*problem
	for i := range s.retries {
		name := s.retries[i].Name
		if s.blocked[name] {
			continue
		}
		want.Name = name
		have := s.described[name]
		plan := kafka.PlanTopic(want, have)
		s.retries[i].Partitions = have.Partitions
		if !plan.Empty() {
			now, err := kafka.ApplyPlan(ctx, s.admin, want, have, plan)
			r.noteTopicChange(s.connKey, want.Name, now, plan, err)
			if err != nil {
				if !errors.Is(err, kafka.ErrTopicExists) {
					errs = append(errs, kafkaProblem(err))
				}
				continue
			}
			s.retries[i].Partitions = now.Partitions
			r.recordTopicChange(ctx, s, "Retry topic", want, have, plan)
		}
		s.topicProblems.add(shrinkProblem("retry topic", want, plan, fix))
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// recordTopicChange logs a change made in Kafka and keeps it for the reconcile's event.
func (r *ConsumerPipelineReconciler) recordTopicChange(ctx context.Context, s *pipelineScope, what string, want kafka.TopicSpec, have kafka.TopicInfo, plan kafka.TopicPlan) {
	change := plan.Describe(want, have)
	ctrl.LoggerFrom(ctx).Info("Reconciled topic", "consumerPipeline", klog.KObj(s.p), "topic", want.Name, "change", change)
	s.changes = append(s.changes, fmt.Sprintf("%s %s %s", what, want.Name, change))
	s.created = s.created || plan.Create
}

// recordTopicChanges emits one event for all the changes a reconcile made: the events API folds
// events of one reason about one object into a series that keeps only the first note, so one event
// per topic would lose all but the first.
func (r *ConsumerPipelineReconciler) recordTopicChanges(s *pipelineScope) {
	if len(s.changes) == 0 {
		return
	}
	reason := eventTopicCorrected
	if s.created {
		reason = eventTopicCreated
	}
	r.Recorder.Eventf(s.p, nil, corev1.EventTypeNormal, reason, "ReconcileTopics", "%s", truncate(strings.Join(s.changes, "; "), maxConditionMessage))
}

// deleteTiers deletes the named retry tiers, skipping any a DeadLetterQueue claims.
func (r *ConsumerPipelineReconciler) deleteTiers(ctx context.Context, s *pipelineScope, tiers []string) error {
	if err := r.connectPipeline(ctx, s); err != nil {
		return err
	}
	var errs []error
	for _, t := range tiers {
		if s.blocked[t] {
			continue
		}
		if err := s.admin.DeleteTopic(ctx, t); err != nil {
			errs = append(errs, err)
			continue
		}
		r.Kafka.Topics.Set(s.connKey, kafka.TopicInfo{Name: t})
	}
	return errors.Join(errs...)
}
