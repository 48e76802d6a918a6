package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	dispatchercfg "github.com/retryops/retry-operator/sdk/config"
)

// Fan-out: any number of pipelines consume one source, each with its own consumer group and its own
// retry tiers (named after the pipeline, tierBase). What pipelines may not share is a consumer group
// (they would split its partitions and commit each other's offsets) and a retry tier (each would
// read the other's retries): of two pipelines on one cluster that would, the older goes on, and
// the newer reports the conflict naming the other and runs no consumers until the other goes. Of
// several pipelines that ask to create their source, the one whose ledger records it manages it.

// tierBase is the base of the pipeline's retry tier names under the manager's topic claim policy.
func tierBase(p *retryv1alpha1.ConsumerPipeline, d kafkaspec.Defaults) string {
	return dispatchercfg.TierBase(d.TopicPrefix, p.Namespace, p.Name)
}

// checkSharing is the conflict of a consumer group or a tier base that an older pipeline on the
// same cluster has (sharingRivals: a refused claim holds nothing): ConsumerGroupConflict or
// TopicConflict, which the claims phase ends with, as a refused claim (refuse); nil when none.
func (r *ConsumerPipelineReconciler) checkSharing(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, self *kafkaspec.Party) (*problem, error) {
	group := consumerGroup(p)
	list := &retryv1alpha1.ConsumerPipelineList{}
	if err := r.List(ctx, list, client.MatchingFields{indexPipelineByGroupClaim: group}); err != nil {
		return nil, err
	}
	rivals, unknown := r.sharingRivals(ctx, p, self, list.Items)
	w := sharingOwner(p, rivals)
	if w.UID != p.UID {
		return &problem{Reason: retryv1alpha1.ReasonConsumerGroupConflict, Kind: problemWaiting, Message: fmt.Sprintf(
			"consumer group %q is already joined by %s, created earlier%s: two pipelines in one group would split its partitions and commit each other's offsets; "+
				"this pipeline runs no consumers until that one goes, or set another spec.source.consumerGroup", group, w, unknownClusterNote(unknown, w.UID))}, nil
	}
	base := tierBase(p, r.Kafka.Defaults)
	list = &retryv1alpha1.ConsumerPipelineList{}
	if err := r.List(ctx, list, client.MatchingFields{indexPipelineByTierClaim: base}); err != nil {
		return nil, err
	}
	rivals, unknown = r.sharingRivals(ctx, p, self, list.Items)
	w = sharingOwner(p, rivals)
	if w.UID != p.UID {
		return tierConflict(base+".retry.*", w.String()+unknownClusterNote(unknown, w.UID)), nil
	}
	return nil, nil
}

// sharingOwner returns, of self and others (the pipelines sharing its consumer group or tier base),
// the one that keeps them: the oldest; of those created within the oldest's second
// (creationTimestamp's resolution), one running on them (runsOnShared), so that a newcomer sorting
// first by name never stops a running pipeline; then by namespace and name (kafkaspec.Winner).
func sharingOwner(self *retryv1alpha1.ConsumerPipeline, others []retryv1alpha1.ConsumerPipeline) kafkaspec.Claimant {
	ps := []*retryv1alpha1.ConsumerPipeline{self}
	for i := range others {
		if others[i].UID != self.UID {
			ps = append(ps, &others[i])
		}
	}
	first := ps[0].CreationTimestamp
	for _, p := range ps {
		if p.CreationTimestamp.Before(&first) {
			first = p.CreationTimestamp
		}
	}
	var tied, running []kafkaspec.Claimant
	for _, p := range ps {
		if p.CreationTimestamp.Unix() != first.Unix() {
			continue
		}
		c := kafkaspec.ClaimantOf("ConsumerPipeline", p)
		tied = append(tied, c)
		if runsOnShared(p) {
			running = append(running, c)
		}
	}
	if len(running) > 0 {
		tied = running
	}
	w, _ := kafkaspec.Winner(tied)
	return w
}

// runsOnShared tells whether the operator last found p, as it is (its generation), free to run on
// its group and tiers: TopicsReady not refused by a claim or a conflict. Another pipeline's status
// decides only a tie of creation times, where nothing else tells the incumbent.
func runsOnShared(p *retryv1alpha1.ConsumerPipeline) bool {
	c := meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady)
	if c == nil || c.ObservedGeneration != p.Generation {
		return false
	}
	switch c.Reason {
	case retryv1alpha1.ReasonConsumerGroupConflict, retryv1alpha1.ReasonTopicConflict, retryv1alpha1.ReasonTopicClaimRefused, retryv1alpha1.ReasonConsumerGroupClaimRefused:
		return false
	}
	return true
}

// tierConflict is the TopicConflict of retry tiers another resource has.
func tierConflict(tiers, other string) *problem {
	return &problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
		"retry topics %s are those of %s: two pipelines would read each other's retries; this pipeline leaves them alone and runs no consumers until that one lets them go",
		tiers, other), maxConditionMessage)}
}

// findSourceOwner says whether the pipeline manages its source, and which pipeline does when one
// does: a pipeline with spec.source.create manages its source unless another pipeline on it has the
// source in its ledger record and this one has not (owned), or both have (recorded at once) and the
// other is older.
func (r *ConsumerPipelineReconciler) findSourceOwner(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, owned []string, self *kafkaspec.Party) (manages bool, owner string, err error) {
	source := string(p.Spec.Source.Topic)
	if p.Spec.Source.Create == nil {
		return false, "", nil
	}
	list := &retryv1alpha1.ConsumerPipelineList{}
	if err := r.List(ctx, list, client.MatchingFields{indexPipelineBySourceClaim: source}); err != nil {
		return false, "", err
	}
	var recorders []kafkaspec.Claimant
	if slices.Contains(owned, source) {
		recorders = append(recorders, kafkaspec.ClaimantOf("ConsumerPipeline", p))
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == p.UID || o.Spec.Source.Create == nil || r.pipelineClaimRefusal(o) != nil || r.Kafka.Defaults.CheckClaim(o.Namespace, source) != nil {
			continue
		}
		owns, err := r.Ledger.Owns(ctx, o, source)
		if err != nil {
			return false, "", err
		}
		if !owns {
			continue
		}
		// A pipeline on another cluster manages a topic of the same name there; one whose cluster
		// was never identified manages none.
		same, err := r.claimClusters().Same(ctx, self, pipelineParty(o))
		if err != nil {
			noteUnknownCluster(ctx, nil, same, o.UID, client.ObjectKeyFromObject(o), err)
		}
		if same {
			recorders = append(recorders, kafkaspec.ClaimantOf("ConsumerPipeline", o))
		}
	}
	if w, ok := kafkaspec.Winner(recorders); ok {
		return w.UID == p.UID, w.String(), nil
	}
	return true, "", nil
}

// heldElsewhere is the TopicConflict of the topics the pipeline would run on or take without
// having recorded them, existing or not, when another resource's ledger record holds one: of tiers
// (the retry tiers it would create or adopt, or would report as someone else's), another
// pipeline's (a tier it still holds, draining, say) or a queue's; of
// source (the source it would create or adopt; "" when none), any but a pipeline reading it as its
// source too (which of those manages it is findSourceOwner's to say). A record may hold a topic that
// does not exist: its resource records before it creates, and a topic may be deleted outside the
// operator. Neither creation nor adoption takes what another resource manages: both would
// reconfigure it, read it as their own and, under deletionPolicy Delete, delete it under the other.
// It lists the whole ledger, so it runs only when there is something to record.
func (r *ConsumerPipelineReconciler) heldElsewhere(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, source string, tiers []string) (*problem, error) {
	topics := slices.Clone(tiers)
	if source != "" {
		topics = append(topics, source)
	}
	if len(topics) == 0 {
		return nil, nil
	}
	holders, err := r.Ledger.HoldersOf(ctx, topics...)
	if err != nil {
		return nil, err
	}
	self := func(h kafkaspec.Holder) bool { return h.Is("ConsumerPipeline", p.Namespace, p.Name) }
	var held []string
	var by string
	for _, name := range tiers {
		if i := slices.IndexFunc(holders[name], func(h kafkaspec.Holder) bool { return !self(h) }); i >= 0 {
			held = append(held, name)
			if by == "" {
				by = holders[name][i].String()
			}
		}
	}
	if len(held) > 0 {
		return tierConflict(joinTiers(held), by), nil
	}
	for _, h := range holders[source] {
		if self(h) {
			continue
		}
		if h.Kind == "ConsumerPipeline" {
			// One that cannot be read (gone, its record not swept yet) may still be what the record says.
			o := &retryv1alpha1.ConsumerPipeline{}
			if r.Get(ctx, client.ObjectKey{Namespace: h.Namespace, Name: h.Name}, o) == nil && string(o.Spec.Source.Topic) == source {
				continue
			}
		}
		return &problem{Reason: retryv1alpha1.ReasonTopicConflict, Kind: problemWaiting, Message: truncate(fmt.Sprintf(
			"source topic %q is managed by %s (the operator's topic ledger holds it for that one): this pipeline neither creates nor adopts it "+
				"and runs no consumers until that one lets it go, or drop spec.source.create", source, h), maxConditionMessage)}, nil
	}
	return nil, nil
}

// otherPipelinesSharing maps a pipeline to the other pipelines on a source of its source's name, in
// a group of its group's name or with its tier base, on any cluster (their reconciles tell which are
// on their own), so that the loser of a conflict takes over as soon as the winner goes and a
// source's other pipelines see a new owner of it.
func (r *ConsumerPipelineReconciler) otherPipelinesSharing(ctx context.Context, o client.Object) []ctrl.Request {
	p := o.(*retryv1alpha1.ConsumerPipeline)
	seen := map[string]bool{}
	var out []ctrl.Request
	for index, key := range map[string]string{
		indexPipelineBySourceClaim: string(p.Spec.Source.Topic),
		indexPipelineByGroupClaim:  consumerGroup(p),
		indexPipelineByTierClaim:   tierBase(p, r.Kafka.Defaults),
	} {
		for _, req := range requestsFor(ctx, r.Client, &retryv1alpha1.ConsumerPipelineList{}, p, client.MatchingFields{index: key}) {
			if k := req.String(); !seen[k] {
				seen[k] = true
				out = append(out, req)
			}
		}
	}
	return out
}

// joinTiers lists tier names for a message.
func joinTiers(names []string) string { return strings.Join(names, ", ") }
