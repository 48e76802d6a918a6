package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/render"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// The retry tiers a policy or naming change leaves behind (the unused tiers: created by the
// pipeline, in its topic ledger record, and no longer in the plan) may still hold records waiting for
// a retry. While they do (the consumer group's committed offsets are below their end), they drain:
// the dispatcher config lists them under topics.draining, so the consumers deliver those records at
// their due time and then follow the current policy. This is so under both deletion policies. Once
// the group has consumed a tier to the end (or it no longer exists) it leaves the list; then under
// retryTopics.deletionPolicy Delete it is deleted, under Retain it stays in Kafka (listed in
// status.topics.unusedRetries) and nothing consumes it.
//
// Under Delete, a drained tier is deleted only when no consumer can still write to it
// (consumersHold): while a change rolls out, pods running the old config keep retrying into what is
// for them a current tier, and a tier deleted under them would lose those records. So the tier must
// have been unused in the previous reconcile's status already (the Deployment template applied then
// no longer wrote to it), and the consumer Deployment, as read now, must have rolled that template
// out completely, or not exist. Until then the tier is kept, listed in status.topics.unusedRetries,
// and the pipeline is looked at again after the refresh interval (and whenever the Deployment
// changes).
//
// The list is found out by the topics phase, before the children are rendered. When that phase
// cannot tell (Kafka failed, or an earlier step ended the phases), the ConfigMap step keeps
// draining every unused tier the applied config consumed (keptDraining): a tier listed for nothing
// costs a consumer on an empty topic, while a tier dropped would strand its records. Nothing is
// deleted then. A pipeline with draining tiers is reconciled again after the refresh interval
// whatever else happens, so a drained tier goes without any other event.

// Event reasons of draining tiers.
const (
	// eventTopicDraining: an unused tier holds records, and the dispatchers consume it until the group
	// has consumed it to the end.
	eventTopicDraining = "TopicDraining"
	// eventTopicDrained: a draining tier was consumed to the end and, under Retain, kept (under
	// Delete the event is TopicDeleted).
	eventTopicDrained = "TopicDrained"
	// eventTopicAwaitingRollout: an unused tier is drained, and its deletion (Delete) waits until no
	// consumer can still write to it.
	eventTopicAwaitingRollout = "TopicAwaitingRollout"
)

// reasonTooManyDrainingTiers: more unused tiers hold records than a dispatcher drains at once
// (dispatchercfg.MaxDrainingTiers); the records of the others are not consumed until the list
// shrinks.
const reasonTooManyDrainingTiers = "TooManyDrainingTiers"

// unusedTiers lists, sorted, the tiers the pipeline created (owned) that the plan no longer needs,
// but those a DeadLetterQueue claims (blocked).
func unusedTiers(p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, owned []string, blocked map[string]bool) []string {
	return slices.DeleteFunc(createdTiers(p, owned), func(n string) bool { return refs.hasTier(n) || blocked[n] })
}

// reconcileUnusedRetryTopics finds the tiers the pipeline created earlier and no longer needs, and
// which of them still hold records the consumer group has not consumed: those drain (t.draining).
// The drained ones are deleted under retryTopics.deletionPolicy Delete (and their record dropped)
// once no consumer can still write to them (consumersHold), and kept under Retain.
// status.topics.unusedRetries lists, under Retain, every unused tier, and under Delete those not
// deleted yet.
func (r *ConsumerPipelineReconciler) reconcileUnusedRetryTopics(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, blocked map[string]bool, k *kafkaClient, t *pipelineTopics, ps *problems) error {
	if !refs.planKnown() {
		return nil
	}
	prevDraining := previousDraining(p)
	unused := unusedTiers(p, refs, t.owned, blocked)
	newly := slices.DeleteFunc(slices.Clone(unused), func(n string) bool { return slices.Contains(t.unused, n) })
	// The tiers already unused in the previous status; quiet are those of them drained then.
	prevUnused := append(slices.Clone(t.unused), prevDraining...)
	quiet := func(n string) bool { return !slices.Contains(newly, n) && !slices.Contains(prevDraining, n) }
	t.unused = unused
	undrained, err := undrainedTiers(ctx, k.admin, consumerGroup(p), unused)
	if err != nil {
		// Which tiers hold records is unknown: nothing is deleted, and the ConfigMap step keeps every
		// tier the applied config consumed draining (keptDraining).
		ps.add(kafkaProblem(err))
		return nil
	}
	deleting := retryDeletionPolicy(p) == retryv1alpha1.DeletionPolicyDelete
	r.setDraining(ctx, p, t, undrained, deleting, ps)
	log := ctrl.LoggerFrom(ctx).WithValues("consumerPipeline", klog.KObj(p))
	var kept, deleted, keptNow []string
	waitNow := map[string][]string{}
	var first *problem
	var rollout *string
	for _, name := range unused {
		wasDraining := slices.Contains(prevDraining, name)
		if _, ok := undrained[name]; ok || !deleting {
			kept = append(kept, name)
			switch {
			case ok:
			case wasDraining:
				log.Info("Retry topic drained, kept", "topic", name)
				r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicDrained, "ReconcileTopics",
					"Retry topic %s drained: the consumer group consumed it to the end, so the dispatchers no longer consume it; kept (retryTopics.deletionPolicy Retain)", name)
			case slices.Contains(newly, name):
				keptNow = append(keptNow, name)
			}
			continue
		}
		if why := consumersHold(ctx, r.rolloutReader(), p, prevUnused, name, &rollout); why != "" {
			kept = append(kept, name)
			t.awaitingRollout = true
			log.V(1).Info("Retry topic drained, deletion waits for the consumers' rollout", "topic", name, "reason", why)
			if !quiet(name) {
				waitNow[why] = append(waitNow[why], name)
			}
			continue
		}
		if err := r.deleteUnusedTier(ctx, p, k, name, wasDraining); err != nil {
			kept = append(kept, name)
			if first == nil {
				first = kafkaProblem(err)
			}
			continue
		}
		deleted = append(deleted, name)
	}
	r.reportKeptTiers(ctx, p, keptNow, waitNow)
	t.unused = kept
	if err := r.forgetCreatedTopics(ctx, p, deleted...); err != nil {
		return err
	}
	if first != nil {
		return first
	}
	return nil
}

// deleteUnusedTier deletes the drained unused tier name (wasDraining: it drained since the previous
// status) and says so.
func (r *ConsumerPipelineReconciler) deleteUnusedTier(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, k *kafkaClient, name string, wasDraining bool) error {
	if err := k.admin.DeleteTopic(ctx, name); err != nil {
		return err
	}
	// The snapshot would say it exists until its next round: a policy wanting it back within that
	// round would find it someone else's (TopicNotOwned) once the ledger forgets it.
	r.Kafka.Topics.Set(k.connKey, kafka.TopicInfo{Name: name})
	ctrl.LoggerFrom(ctx).Info("Deleted unused retry topic", "consumerPipeline", klog.KObj(p), "topic", name, "drained", wasDraining)
	why := "no longer used"
	if wasDraining {
		why = "drained (the consumer group consumed it to the end)"
	}
	r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicDeleted, "ReconcileTopics",
		"Retry topic %s %s, deleted (retryTopics.deletionPolicy Delete)", name, why)
	return nil
}

// reportKeptTiers says, in one event each, which tiers went unused and are kept under Retain
// (keptNow), and which drained tiers wait, under Delete, for the consumers' rollout (waitNow, by
// why they wait): the recorder folds events of the same reason into one series whatever their note.
func (r *ConsumerPipelineReconciler) reportKeptTiers(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, keptNow []string, waitNow map[string][]string) {
	if len(keptNow) > 0 {
		ctrl.LoggerFrom(ctx).Info("Retry topics no longer used", "consumerPipeline", klog.KObj(p), "topics", keptNow)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicKept, "ReconcileTopics",
			"Retry topics no longer used, kept (retryTopics.deletionPolicy Retain): %s", strings.Join(keptNow, ", "))
	}
	if len(waitNow) > 0 {
		var parts []string
		for _, why := range slices.Sorted(maps.Keys(waitNow)) {
			parts = append(parts, strings.Join(waitNow[why], ", ")+" ("+why+")")
		}
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicAwaitingRollout, "ReconcileTopics",
			"Retry topics drained, deleted (retryTopics.deletionPolicy Delete) once the consumer Deployment has rolled out a config that no longer writes to them: %s",
			truncate(strings.Join(parts, "; "), maxConditionMessage))
	}
}

// rolloutReader reads the consumer Deployment before a drained tier is deleted: uncached when it can
// (APIReader), since a lagging cache could still show the previous template fully rolled out while
// pods of it, which write to the tier, run. It is read only when a drained tier waits for deletion.
func (r *ConsumerPipelineReconciler) rolloutReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// consumersHold says why a consumer may still write to the drained unused tier name, or "" when
// none can: the tier was unused in the previous status (prevUnused), so the Deployment template
// applied then no longer wrote to it, and the pipeline's consumer Deployment has rolled out (see
// rolloutPending) or does not exist. rollout keeps the Deployment's state for the other tiers of the
// reconcile.
func consumersHold(ctx context.Context, c client.Reader, p *retryv1alpha1.ConsumerPipeline, prevUnused []string, name string, rollout **string) string {
	if !slices.Contains(prevUnused, name) {
		return "the pod template that no longer uses it is applied in this reconcile"
	}
	if *rollout == nil {
		why := rolloutPending(ctx, c, p)
		*rollout = &why
	}
	return **rollout
}

// rolloutPending says why the pipeline's consumer Deployment may still run pods of an older pod
// template, or "" when it has none: its controller observed its current generation, every replica
// (replicas 0 included) is of the current template and none terminates. A Deployment that does not
// exist, or that the pipeline does not control, runs no consumers of the pipeline.
func rolloutPending(ctx context.Context, c client.Reader, p *retryv1alpha1.ConsumerPipeline) string {
	d := &appsv1.Deployment{}
	name := render.DeploymentName(p)
	if err := c.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: name}, d); err != nil {
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("Deployment %s cannot be read: %v", name, err)
	}
	if !metav1.IsControlledBy(d, p) {
		return ""
	}
	st := d.Status
	switch {
	case st.ObservedGeneration < d.Generation:
		return fmt.Sprintf("Deployment %s has not observed its generation %d yet", name, d.Generation)
	case st.UpdatedReplicas != st.Replicas:
		return fmt.Sprintf("Deployment %s is rolling out (%d of %d replicas updated)", name, st.UpdatedReplicas, st.Replicas)
	case ptr.Deref(st.TerminatingReplicas, 0) > 0:
		return fmt.Sprintf("Deployment %s has %d terminating replicas", name, *st.TerminatingReplicas)
	}
	return ""
}

// setDraining sets t.draining from the undrained tiers (name to records left): the first
// dispatchercfg.MaxDrainingTiers by name. A tier that starts draining gets a Normal event; tiers
// beyond the bound are a problem on TopicsReady (recorded in ps), since nothing consumes their
// records.
func (r *ConsumerPipelineReconciler) setDraining(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, t *pipelineTopics, undrained map[string]int64, deleting bool, ps *problems) {
	names := slices.Sorted(maps.Keys(undrained))
	over := names[min(len(names), dispatchercfg.MaxDrainingTiers):]
	t.draining, t.drainingKnown = names[:len(names)-len(over)], true
	then := "kept but no longer consumed (retryTopics.deletionPolicy Retain)"
	if deleting {
		then = "deleted (retryTopics.deletionPolicy Delete)"
	}
	for _, name := range t.draining {
		if slices.Contains(previousDraining(p), name) {
			continue
		}
		ctrl.LoggerFrom(ctx).Info("Retry topic no longer used, draining", "consumerPipeline", klog.KObj(p), "topic", name, "records", undrained[name])
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicDraining, "ReconcileTopics",
			"Retry topic %s is no longer used and %s in it: the dispatchers keep consuming it (topics.draining) until the consumer group has consumed it to the end; then it is %s",
			name, recordsWait(undrained[name]), then)
	}
	if len(over) > 0 {
		ps.add(&problem{Reason: reasonTooManyDrainingTiers, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
			"%d unused retry topics hold records the consumer group has not consumed, and the dispatchers drain at most %d at once (the first by name): the records in %s are not consumed until the list shrinks",
			len(names), dispatchercfg.MaxDrainingTiers, strings.Join(over, ", ")), maxConditionMessage)})
	}
}

// recordsWait is "1 record waits" or "n records wait".
func recordsWait(n int64) string {
	if n == 1 {
		return "1 record waits"
	}
	return fmt.Sprintf("%d records wait", n)
}

// keptDraining is the draining list when the topics phase could not find it out: every unused
// tier (of owned, but the blocked ones) the applied dispatcher config consumed, as a current tier or
// draining; without a readable config of the pipeline's, every unused tier. At most
// dispatchercfg.MaxDrainingTiers, the first by name.
func (r *ConsumerPipelineReconciler) keptDraining(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, owned []string, blocked map[string]bool) []string {
	keep := unusedTiers(p, refs, owned, blocked)
	cm := &corev1.ConfigMap{}
	var applied dispatchercfg.Config
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: render.ConfigMapName(p)}, cm); err == nil &&
		metav1.IsControlledBy(cm, p) && json.Unmarshal([]byte(cm.Data[render.ConfigKey]), &applied) == nil {
		consumed := append(applied.Topics.Retries.Names(), applied.Topics.Draining...)
		keep = slices.DeleteFunc(keep, func(n string) bool { return !slices.Contains(consumed, n) })
	}
	keep = keep[:min(len(keep), dispatchercfg.MaxDrainingTiers)]
	started := slices.DeleteFunc(slices.Clone(keep), func(n string) bool { return slices.Contains(previousDraining(p), n) })
	if len(started) > 0 {
		// One event for all: the recorder folds events of the same reason into one series whatever
		// their note, and which of them would be kept is a race.
		ctrl.LoggerFrom(ctx).Info("Retry topics no longer used, draining until Kafka tells they are drained", "consumerPipeline", klog.KObj(p), "topics", started)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventTopicDraining, "ReconcileTopics",
			"Retry topics no longer used, and whether records wait in them is not known yet (see TopicsReady): the dispatchers keep consuming them (topics.draining) until the consumer group has consumed them to the end: %s",
			truncate(strings.Join(started, ", "), maxConditionMessage))
	}
	return keep
}

// undrainedTiers returns, of the topics tiers, those holding records the consumer group group has
// not consumed (by their count): a partition is drained when it is empty or the group's committed
// offset reached its end. Topics that no longer exist are drained.
func undrainedTiers(ctx context.Context, admin kafka.Admin, group string, tiers []string) (map[string]int64, error) {
	if len(tiers) == 0 {
		return nil, nil
	}
	offsets, err := admin.ListOffsets(ctx, tiers...)
	if err != nil {
		return nil, err
	}
	committed, err := admin.GroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for topic, parts := range offsets {
		var left int64
		for _, po := range parts {
			at, ok := committed[group].Topics[topic][po.Partition]
			if !ok || at < po.Start {
				at = po.Start
			}
			left += max(po.End-at, 0)
		}
		if left > 0 {
			out[topic] = left
		}
	}
	return out, nil
}
