package controllers

import (
	"context"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// pipelineLive is what the figures phase found. What it did not read this time keeps its value in
// status.
type pipelineLive struct {
	// lagRead is true when the offsets and the group's commits were read.
	lagRead bool
	// consumerLag is the group's lag on the source topic; nil when the topic does not exist.
	consumerLag *int64
	// tierBacklog is the group's lag on each retry tier, by topic.
	tierBacklog map[string]int64
	// drainingBacklog is the group's lag on each draining tier (s.draining), by topic.
	drainingBacklog map[string]int64
	// dueLag is consumerLag plus the tier records already due and the draining tiers' backlog; nil
	// when the due offsets could not be read (status keeps its value) or the source does not exist.
	dueLag *int64
	// earliestRead is set when the due offsets were read; earliestDue is then the earliest time a
	// record waiting in a retry tier can come due (kafkastats.EarliestWaiting), nil when none waits.
	earliestRead bool
	earliestDue  *time.Time

	// withheld is true when the pipeline's claim is refused (pipelineClaim.refused): its status
	// shows no figure of its source or group, not even the previous ones.
	withheld bool

	// deadLettersRead is true when deadLetterMessages was found out.
	deadLettersRead bool
	// deadLetterMessages is the number of dead letters from this pipeline in its queue; nil when the
	// queue does not exist or was never counted.
	deadLetterMessages *int64

	// The circuit breaker state (status.circuit) comes from the consumers' reports, read by the
	// children phase (pipelineChildren.circuit, consumerpipeline_circuit.go).
}

// figures is the fourth phase: it reads the pipeline's live figures, the consumer group's lag on the source
// topic and on each retry tier, draining ones included, from the connection's batched offsets
// (one ListOffsets round for every topic of every queue and pipeline) and batched commits (one
// OffsetFetch round for every group), and the dead letters from this pipeline that its queue holds. A failed read is logged and
// leaves the figures in status as they were.
func (r *ConsumerPipelineReconciler) figures(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, t pipelineTopics, k *kafkaClient) pipelineLive {
	var live pipelineLive
	r.readDeadLetterCount(ctx, p, &live)
	if k == nil || k.admin == nil {
		return live
	}
	member := pipelineOwner(client.ObjectKeyFromObject(p))
	log := ctrl.LoggerFrom(ctx)
	source := string(p.Spec.Source.Topic)
	topics := []string{source}
	for _, rt := range t.retries {
		topics = append(topics, rt.Name)
	}
	topics = append(topics, t.draining...)
	offsets, _, err := r.Kafka.Offsets.Get(ctx, k.admin, k.connKey, member, topics, r.RefreshInterval)
	if err != nil {
		log.Info("Could not read the offsets of the pipeline's topics; lag and backlog in status are left as they were",
			"consumerPipeline", klog.KObj(p), "error", truncate(err.Error(), maxConditionMessage))
		return live
	}
	group := consumerGroup(p)
	commits, err := r.Kafka.Commits.Get(ctx, k.admin, k.connKey, member, group, r.RefreshInterval)
	if err != nil {
		log.Info("Could not read the offsets the consumer group committed; lag and backlog in status are left as they were",
			"consumerPipeline", klog.KObj(p), "consumerGroup", group, "error", truncate(err.Error(), maxConditionMessage))
		return live
	}
	live.lagRead = true
	if po := offsets[source]; po != nil {
		lag := kafkastats.GroupLag(po, commits.Topics[source])
		live.consumerLag = &lag
	}
	live.tierBacklog = make(map[string]int64, len(t.retries))
	for _, rt := range t.retries {
		live.tierBacklog[rt.Name] = kafkastats.GroupLag(offsets[rt.Name], commits.Topics[rt.Name])
	}
	live.drainingBacklog = make(map[string]int64, len(t.draining))
	for _, name := range t.draining {
		live.drainingBacklog[name] = kafkastats.GroupLag(offsets[name], commits.Topics[name])
	}
	r.readDueLag(ctx, p, refs, t, k, &live, offsets, commits.Topics)
	return live
}

// readDueLag works out the due lag from the offsets and commits just read and the due offsets of
// the tiers (one batched round per connection, kafkastats.DueOffsets), and the records dead-letter
// replays wrote into the tiers, due when written (kafkastats.Replayed: no Kafka request). A tier whose delays the
// plan does not give (the policy is missing) and a draining tier count whole: their records must
// be consumed and nothing says they wait.
func (r *ConsumerPipelineReconciler) readDueLag(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refs pipelineRefs, t pipelineTopics, k *kafkaClient, live *pipelineLive, offsets map[string][]kafka.PartitionOffsets, commits map[string]map[int32]int64) {
	if live.consumerLag == nil {
		return
	}
	latest := make(map[string]time.Duration, len(refs.tiers))
	earliest := make(map[string]time.Duration, len(refs.tiers))
	for _, tier := range refs.tiers {
		latest[tier.Name], earliest[tier.Name] = tier.Latest.Duration, tier.Earliest.Duration
	}
	ask := make(map[string]time.Duration, len(t.retries))
	for _, rt := range t.retries {
		if d, ok := latest[rt.Name]; ok {
			ask[rt.Name] = d
		}
	}
	due := *live.consumerLag
	if len(ask) > 0 {
		ends, taken, err := r.Kafka.Due.Get(ctx, k.admin, k.connKey, pipelineOwner(client.ObjectKeyFromObject(p)), ask, r.RefreshInterval)
		if err != nil {
			ctrl.LoggerFrom(ctx).Info("Could not read which retry-tier records are due; due lag in status is left as it was",
				"consumerPipeline", klog.KObj(p), "error", truncate(err.Error(), maxConditionMessage))
			return
		}
		earlier := func(at time.Time) {
			if live.earliestDue == nil || at.Before(*live.earliestDue) {
				live.earliestDue = &at
			}
		}
		for name := range ask {
			due += kafkastats.DueLag(offsets[name], commits[name], ends[name])
			if at, ok := kafkastats.EarliestWaiting(offsets[name], commits[name], ends[name], earliest[name]); ok {
				earlier(at)
			}
			// Records a Replay wrote are due when written, whatever their timestamps say.
			if n := r.Kafka.replayedDue(k.connKey, name, offsets[name], commits[name], ends[name]); n > 0 {
				due += n
				earlier(taken)
			}
		}
	}
	live.earliestRead = true
	for _, rt := range t.retries {
		if _, ok := ask[rt.Name]; !ok {
			due += live.tierBacklog[rt.Name]
		}
	}
	for _, b := range live.drainingBacklog {
		due += b
	}
	live.dueLag = &due
}

// pipelineID is how dead letters name the pipeline they come from (the retryops.pipeline header).
func pipelineID(p *retryv1alpha1.ConsumerPipeline) string { return p.Namespace + "/" + p.Name }

// readDeadLetterCount finds out how many dead letters from this pipeline its queue holds: the
// queue's own figure for it in status.pipelines, so that both statuses agree. That list holds the 20
// largest only; for a pipeline not in a full list the complete counts the queue's last refresh kept
// in memory answer, and without them (the operator just started) the figure is left as it was.
func (r *ConsumerPipelineReconciler) readDeadLetterCount(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, live *pipelineLive) {
	key := types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.DeadLetterQueueRef.Name}
	dlq := &retryv1alpha1.DeadLetterQueue{}
	if err := r.Get(ctx, key, dlq); err != nil {
		if apierrors.IsNotFound(err) {
			live.deadLettersRead, live.deadLetterMessages = true, nil
		}
		return
	}
	n, known := deadLetterCount(dlq.Status, pipelineID(p), func(id string) (int64, bool) {
		return r.Kafka.ByPipeline.Get(dlqFigures(dlq), id, r.Clock.Now())
	})
	if known {
		live.deadLettersRead, live.deadLetterMessages = true, n
	}
}

// deadLetterCount returns the dead letters from the pipeline id in a queue of status st: nil when
// the queue was never counted, its entry in st.pipelines, 0 when the list is complete and lacks it,
// else what complete answers. known is false when nothing answers.
func deadLetterCount(st retryv1alpha1.DeadLetterQueueStatus, id string, complete func(string) (int64, bool)) (n *int64, known bool) {
	if st.Messages == nil {
		return nil, true
	}
	for _, c := range st.Pipelines {
		if c.Name == id {
			return &c.Count, true
		}
	}
	if len(st.Pipelines) < maxBreakdownEntries {
		var zero int64
		return &zero, true
	}
	if c, ok := complete(id); ok {
		return &c, true
	}
	return nil, false
}

// setPipelineFigures writes the live figures into st, after setPipelineTopics: the consumer lag,
// the backlog of each retry tier and their sum with the draining tiers', and the dead letters from
// the pipeline. Figures not read this time keep the values of the previous status (previous; a
// tier's backlog by its name).
// status.readyReplicas is the Deployment step's; status.circuit the Circuit step's.
func setPipelineFigures(st *retryv1alpha1.ConsumerPipelineStatus, previous *retryv1alpha1.PipelineTopics, live pipelineLive) {
	before := map[string]int64{}
	if previous != nil {
		for _, t := range previous.Retries {
			before[t.Name] = t.Backlog
		}
	}
	if st.Topics != nil {
		var total int64
		for i := range st.Topics.Retries {
			t := &st.Topics.Retries[i]
			if b, ok := live.tierBacklog[t.Name]; ok && live.lagRead {
				t.Backlog = b
			} else if live.withheld {
				t.Backlog = 0
			} else {
				t.Backlog = before[t.Name]
			}
			total += t.Backlog
		}
		// Records waiting in draining tiers wait for a retry as much as those in the current ones.
		for _, b := range live.drainingBacklog {
			total += b
		}
		if live.lagRead {
			st.RetryBacklog = &total
		}
	}
	if live.lagRead {
		st.ConsumerLag = live.consumerLag
		if live.consumerLag == nil || live.dueLag != nil {
			st.DueLag = live.dueLag
		}
	}
	if live.withheld {
		st.ConsumerLag, st.RetryBacklog, st.DueLag = nil, nil, nil
	}
	if live.deadLettersRead {
		st.DeadLetterMessages = live.deadLetterMessages
	}
}

// exportPipeline sets the pipeline's gauges to the figures of its status.
func (r *ConsumerPipelineReconciler) exportPipeline(key types.NamespacedName, st retryv1alpha1.ConsumerPipelineStatus) {
	if r.Metrics == nil {
		return
	}
	r.Metrics.SetConsumerPipeline(key.Namespace, key.Name, opmetrics.ConsumerPipelineFigures{
		ConsumerLag:        st.ConsumerLag,
		RetryBacklog:       st.RetryBacklog,
		DueLag:             st.DueLag,
		DeadLetterMessages: st.DeadLetterMessages,
		ReadyReplicas:      st.ReadyReplicas,
		Circuit:            string(st.Circuit),
	})
}

// deadLetterCountsChanged enqueues, when a DeadLetterQueue's status changes what its pipelines
// report, the pipelines that reference it: when it is counted for the first time (or no more), when
// the count of one of them changed in status.pipelines (only those), and, while that list is full,
// every one (a pipeline below the 20 largest reads the queue's complete counts).
func (r *ConsumerPipelineReconciler) deadLetterCountsChanged() handler.EventHandler {
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			oldQ, ok1 := e.ObjectOld.(*retryv1alpha1.DeadLetterQueue)
			newQ, ok2 := e.ObjectNew.(*retryv1alpha1.DeadLetterQueue)
			if !ok1 || !ok2 {
				return
			}
			changed, all := changedPipelineCounts(oldQ.Status, newQ.Status)
			if !all && len(changed) == 0 {
				return
			}
			list := &retryv1alpha1.ConsumerPipelineList{}
			if err := r.List(ctx, list, client.InNamespace(newQ.Namespace), client.MatchingFields{indexPipelineByDLQ: newQ.Name}); err != nil {
				return
			}
			for i := range list.Items {
				if all || changed[pipelineID(&list.Items[i])] {
					q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
		},
	}
}

// changedPipelineCounts compares two statuses of a queue: the pipelines whose count differs, or all
// when whether the queue is counted changed or a list is full.
func changedPipelineCounts(before, after retryv1alpha1.DeadLetterQueueStatus) (changed map[string]bool, all bool) {
	if (before.Messages == nil) != (after.Messages == nil) ||
		len(before.Pipelines) >= maxBreakdownEntries || len(after.Pipelines) >= maxBreakdownEntries {
		return nil, !slices.Equal(before.Pipelines, after.Pipelines) || (before.Messages == nil) != (after.Messages == nil)
	}
	counts := func(cs []retryv1alpha1.NamedCount) map[string]int64 {
		m := make(map[string]int64, len(cs))
		for _, c := range cs {
			m[c.Name] = c.Count
		}
		return m
	}
	b, a := counts(before.Pipelines), counts(after.Pipelines)
	changed = map[string]bool{}
	for name, n := range a {
		if m, ok := b[name]; !ok || m != n {
			changed[name] = true
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			changed[name] = true
		}
	}
	return changed, false
}
