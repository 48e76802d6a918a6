package controllers

import (
	"context"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkastats"
	"github.com/retryops/retry-operator/internal/lease"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/render"
)

// dlqLive is what the figures phase of a DeadLetterQueue reconcile found.
type dlqLive struct {
	// breakdown is the tally of the records held, every name (nil: not read this time, the status
	// keeps its figures).
	breakdown *kafkastats.Breakdown
	// growth is the net growth rate of the message count.
	growth growthRate
	// now is when the Healthy condition was judged.
	now time.Time
	// figuresAt is when the figures the status shows were read (zero: not since the manager
	// started), set by judgeFigures.
	figuresAt time.Time
}

// judgeFigures sets, in run.live, when the figures were read and when they are judged, whichever
// phases ran: this reconcile's read, else the last snapshot of the topic's offsets the batched
// reads kept (which a failed round does not replace).
func (r *DeadLetterQueueReconciler) judgeFigures(dlq *retryv1alpha1.DeadLetterQueue, run *dlqRun) {
	live := &run.live
	if live.now.IsZero() {
		live.now = r.Clock.Now()
	}
	switch {
	case run.offsets.counted:
		live.figuresAt = run.offsets.at
	case run.conn.connKey != "":
		if _, taken, ok := r.Kafka.Offsets.Peek(run.conn.connKey, run.spec.want.Name); ok {
			live.figuresAt = taken
		}
	}
	// A reconcile that could not connect has no snapshot to peek at: the figures were read when
	// the growth history last recorded them.
	if last, ok := r.growth.last(dlq.UID); ok && last.After(live.figuresAt) {
		live.figuresAt = last
	}
}

// dlqFigures names the queue's tally and its counts by pipeline: by UID, so that a queue created
// again under its name (its topic maybe too) counts afresh.
func dlqFigures(dlq *retryv1alpha1.DeadLetterQueue) string {
	return dlqOwner(client.ObjectKeyFromObject(dlq)) + "/" + string(dlq.UID)
}

// keepFigures renews what is kept of the queue's figures (its tally, its counts by pipeline, its
// growth history and state counts) at the start of each reconcile, whether or not Kafka answers
// this time: a queue alive through an outage longer than the leases must not count again from the
// start once Kafka is back.
func (r *DeadLetterQueueReconciler) keepFigures(dlq *retryv1alpha1.DeadLetterQueue, interval time.Duration) {
	now, who := r.Clock.Now(), dlqFigures(dlq)
	r.Kafka.Tallies.Renew(who, now, interval)
	r.Kafka.ByPipeline.Renew(who, now, interval)
	r.growth.renew(dlq.UID, now, dlqGrowthWindow(dlq))
	r.stateCounts.queues.Renew(dlq.UID, now, lease.For(interval))
}

// figures is the figures phase: it brings the queue's breakdown (reasons, error types, pipelines,
// oldest and newest times) up to the offsets o the reconcile read, reading only the records new
// since the last refresh, and records the message count for the growth rate. A failed read keeps
// the figures of status as they are: it is logged, and the next refresh goes on from what was read.
func (r *DeadLetterQueueReconciler) figures(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, spec dlqSpec, o dlqOffsets, k *kafkaClient) (dlqLive, error) {
	live := dlqLive{now: r.Clock.Now()}
	if !o.counted {
		return live, nil
	}
	live.growth = r.growth.record(dlq.UID, o.at, kafkastats.CountMessages(o.offsets), dlqGrowthWindow(dlq))
	b, err := r.Kafka.Tallies.Breakdown(ctx, k.conn, k.connKey, dlqFigures(dlq), spec.want.Name, o.offsets, o.at, spec.interval)
	if err != nil {
		if ctx.Err() != nil {
			return live, ctx.Err()
		}
		ctrl.LoggerFrom(ctx).Info("Could not read the new dead letters; the breakdown in status is left as it was",
			"deadLetterQueue", klog.KObj(dlq), "topic", spec.want.Name, "error", truncate(err.Error(), maxConditionMessage))
		return live, nil
	}
	live.breakdown = &b
	return live, nil
}

// publishLiveFigures runs once status st was written (or found unchanged): it sets the queue's
// gauges to the figures of st, keeps the full per-pipeline counts for the pipelines, and records an
// event when Healthy changed.
func (r *DeadLetterQueueReconciler) publishLiveFigures(ctx context.Context, dlq *retryv1alpha1.DeadLetterQueue, live dlqLive, before *retryv1alpha1.DeadLetterQueueStatus, st retryv1alpha1.DeadLetterQueueStatus) {
	key := client.ObjectKeyFromObject(dlq)
	r.exportDLQ(key, st)
	if b := live.breakdown; b != nil {
		r.Kafka.ByPipeline.Set(dlqFigures(dlq), b.Pipelines, r.Clock.Now(), r.refreshInterval(dlq))
	}

	old := meta.FindStatusCondition(before.Conditions, retryv1alpha1.ConditionHealthy)
	c := meta.FindStatusCondition(st.Conditions, retryv1alpha1.ConditionHealthy)
	if !healthChanged(old, c) {
		return
	}
	log := ctrl.LoggerFrom(ctx)
	if c.Status == metav1.ConditionTrue {
		log.Info("Dead letter queue is healthy", "deadLetterQueue", klog.KObj(dlq))
		r.Recorder.Eventf(dlq, nil, corev1.EventTypeNormal, c.Reason, "CheckThresholds", "%s", c.Message)
		return
	}
	log.Info("Dead letter queue crossed an alert threshold", "deadLetterQueue", klog.KObj(dlq), "reason", c.Reason, "message", c.Message)
	r.Recorder.Eventf(dlq, nil, corev1.EventTypeWarning, c.Reason, "CheckThresholds", "%s", c.Message)
}

// healthChanged tells whether Healthy changed in a way worth an event: its status, or the reason it
// is False. A queue that starts out healthy or unknown is not news.
func healthChanged(before, after *metav1.Condition) bool {
	switch {
	case after == nil || after.Status == metav1.ConditionUnknown:
		return false
	case before == nil || before.Status == metav1.ConditionUnknown:
		return after.Status == metav1.ConditionFalse
	case before.Status != after.Status:
		return true
	default:
		return after.Status == metav1.ConditionFalse && before.Reason != after.Reason
	}
}

// exportDLQ sets the queue's gauges to the figures of its status: the alert rules read exactly what
// status shows. A queue never counted has no series.
func (r *DeadLetterQueueReconciler) exportDLQ(key types.NamespacedName, st retryv1alpha1.DeadLetterQueueStatus) {
	if r.Metrics == nil {
		return
	}
	if st.Messages == nil {
		r.Metrics.DeleteDeadLetterQueue(key.Namespace, key.Name)
		return
	}
	f := opmetrics.DeadLetterQueueFigures{Messages: *st.Messages, ByReason: map[string]int64{}}
	// The age alert watches the oldest dead letter nobody decided on: once the record of decisions
	// is counted, the oldest pending one (none pending: no series).
	switch {
	case st.Pending != nil && *st.Pending == 0:
	case st.OldestPendingTime != nil:
		f.Oldest = st.OldestPendingTime.Time
	case st.OldestMessageTime != nil && st.Pending == nil:
		f.Oldest = st.OldestMessageTime.Time
	}
	for _, c := range st.Reasons {
		f.ByReason[c.Name] = c.Count
	}
	r.Metrics.SetDeadLetterQueue(key.Namespace, key.Name, f)
}

// growthHistory is the recent message counts of every queue, for their growth rates, by the
// queue's UID (a queue created again under its name starts afresh). A queue's history goes once it
// is not recorded for lease.For(its window): that of a queue deleted goes by itself. It is safe for
// concurrent use.
type growthHistory struct {
	mu     sync.Mutex
	queues map[types.UID]*growthSamples
	leases lease.Table[types.UID]
}

// record adds a sample of the queue's message count, taken at at, and returns the growth rate
// over window.
func (h *growthHistory) record(uid types.UID, at time.Time, messages int64, window time.Duration) growthRate {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queues == nil {
		h.queues = map[types.UID]*growthSamples{}
	}
	for _, gone := range h.leases.Expired(at) {
		delete(h.queues, gone)
	}
	h.leases.Renew(uid, at, lease.For(window))
	g := h.queues[uid]
	if g == nil {
		g = &growthSamples{}
		h.queues[uid] = g
	}
	return g.add(at, messages, window)
}

// last returns when the queue's message count was last recorded (false: not since the manager
// started).
func (h *growthHistory) last(uid types.UID) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g := h.queues[uid]; g != nil && len(g.samples) > 0 {
		return g.samples[len(g.samples)-1].at, true
	}
	return time.Time{}, false
}

// renew keeps the history of uid, if any, for lease.For(window) from now.
func (h *growthHistory) renew(uid types.UID, now time.Time, window time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.queues[uid]; ok {
		h.leases.Renew(uid, now, lease.For(window))
	}
}

// len is the number of queues with a history.
func (h *growthHistory) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.queues)
}

// dlqGrowthWindow is the range over which the DeadLetterQueueGrowth alert measures the growth rate.
func dlqGrowthWindow(dlq *retryv1alpha1.DeadLetterQueue) time.Duration {
	return render.DeadLetterQueueGrowthWindow(dlq)
}

// maxGrowthSamples bounds the history of one queue (a refresh every second over a 5 minute window
// needs 300).
const maxGrowthSamples = 512

// growthSample is a message count at a time.
type growthSample struct {
	at       time.Time
	messages int64
}

// growthSamples is the recent message counts of one queue, oldest first.
type growthSamples struct {
	samples []growthSample
}

// growthRate is a net growth rate of a queue's message count.
type growthRate struct {
	// perMinute is the rate in messages per minute.
	perMinute float64
	// known is false with fewer than two samples in the window.
	known bool
	// window is the range it was measured over.
	window time.Duration
}

// add records messages at time at (a sample at the same time as the last replaces it; an older one
// is ignored), drops the samples older than window, and returns the rate over what is left.
func (g *growthSamples) add(at time.Time, messages int64, window time.Duration) growthRate {
	n := len(g.samples)
	switch {
	case n > 0 && at.Equal(g.samples[n-1].at):
		g.samples[n-1].messages = messages
	case n == 0 || at.After(g.samples[n-1].at):
		g.samples = append(g.samples, growthSample{at: at, messages: messages})
	}
	cut := 0
	for cut < len(g.samples) && g.samples[cut].at.Before(at.Add(-window)) {
		cut++
	}
	if over := len(g.samples) - cut - maxGrowthSamples; over > 0 {
		cut += over
	}
	if cut > 0 {
		g.samples = append(g.samples[:0], g.samples[cut:]...)
	}
	perMinute, known := growthPerMinute(g.samples)
	return growthRate{perMinute: perMinute, known: known, window: window}
}

// growthPerMinute is the least-squares slope of the samples, per minute: what Prometheus's deriv()
// computes over the samples of a range, so that the condition and the DeadLetterQueueGrowth alert
// judge the same rate (the alert samples the gauge at each scrape, the condition at each refresh).
// It needs two samples at different times.
func growthPerMinute(samples []growthSample) (float64, bool) {
	if len(samples) < 2 {
		return 0, false
	}
	t0 := samples[0].at
	var sumT, sumV float64
	for _, s := range samples {
		sumT += s.at.Sub(t0).Seconds()
		sumV += float64(s.messages)
	}
	n := float64(len(samples))
	meanT, meanV := sumT/n, sumV/n
	var cov, varT float64
	for _, s := range samples {
		dt := s.at.Sub(t0).Seconds() - meanT
		cov += dt * (float64(s.messages) - meanV)
		varT += dt * dt
	}
	if varT == 0 {
		return 0, false
	}
	perMinute := cov / varT * 60
	if math.Abs(perMinute) < 1e-9 {
		perMinute = 0
	}
	return perMinute, true
}
