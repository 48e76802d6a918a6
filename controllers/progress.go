package controllers

import (
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/lease"
)

// Which changes of Ready are worth an event, and of which type. A Ready that goes False on the
// way to True (a pipeline applied together with its policy and queue, a first rollout) is a Normal
// event, or none before a first Ready: a Warning is for what a person must look at, and a healthy
// apply of many resources must not fill `kubectl get events` with them.

// progressReasons are the reasons of a Ready that is not True yet on the way to True, set by no
// problem: a first reconcile, a rollout under way.
var progressReasons = []string{retryv1alpha1.ReasonReconciling, reasonProgressing}

// progress reports whether ready, not True, is normal progress: every problem of ps is Progress,
// and ready's reason is one of them or a progress reason.
func (ps problems) progress(ready *metav1.Condition) bool {
	for _, p := range ps {
		if !p.Progress {
			return false
		}
	}
	return slices.Contains(progressReasons, ready.Reason) || slices.ContainsFunc(ps, func(p *problem) bool { return p.Reason == ready.Reason })
}

// onWayToFirstReady reports whether ready, not True, with before the conditions it replaces, is a
// resource on its way to a first Ready (a first reconcile, a first rollout) and nothing else: no
// change a person must hear of, which would be one event per resource of a large apply.
func (ps problems) onWayToFirstReady(before []metav1.Condition, ready *metav1.Condition) bool {
	return !meta.IsStatusConditionTrue(before, retryv1alpha1.ConditionReady) && ps.progress(ready) && slices.Contains(progressReasons, ready.Reason)
}

// readyChanged tells whether a condition changed (status, reason or message): each such change is
// worth an event.
func readyChanged(before, after *metav1.Condition) bool {
	if after == nil {
		return false
	}
	return before == nil || before.Status != after.Status || before.Reason != after.Reason || before.Message != after.Message
}

// conditionChanged returns the condition condType of after, and whether it changed from before.
func conditionChanged(before, after []metav1.Condition, condType string) (*metav1.Condition, bool) {
	a := meta.FindStatusCondition(after, condType)
	return a, readyChanged(meta.FindStatusCondition(before, condType), a)
}

// ReferenceGracePeriod is how long a reference (a RetryPolicy, a DeadLetterQueue, a Secret) may be
// missing before it is worth a Warning. Objects applied together arrive in any order (GitOps), so a
// reference missing for a few seconds is progress; one missing this long is likely a typo.
const ReferenceGracePeriod = 2 * time.Minute

// missingReferences remembers, per resource, since when each of its references is missing, so
// that a reference missing past ReferenceGracePeriod gets one Warning per episode, not one per
// resync. A restart of the manager starts the episodes again. Resources are kept by namespace and
// name, their episodes leased for a few refresh intervals from each reconcile: one deleted (even
// without its finalizer, so that no reconcile lets it go) goes by itself; a resource recreated under
// the same name starts afresh (its UID differs).
type missingReferences struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	// byName holds, per resource, the episode of each missing reference by its problem's message.
	byName map[types.NamespacedName]missingOf
	leases lease.Table[types.NamespacedName]
}

// missingOf are the episodes of one resource, the one of UID uid.
type missingOf struct {
	uid      types.UID
	episodes map[string]*missingEpisode
}

type missingEpisode struct {
	since  time.Time
	warned bool
}

func newMissingReferences(c clock.PassiveClock) *missingReferences {
	return &missingReferences{clock: c, byName: map[types.NamespacedName]missingOf{}}
}

// observe takes the problems of one reconcile of the resource key, of UID uid, reconciled again
// within interval, and returns the notes of the Warnings now due: the message of each reference
// missing for ReferenceGracePeriod or longer and not warned of yet, with how long. A reference no
// longer reported ends its episode.
func (m *missingReferences) observe(key types.NamespacedName, uid types.UID, ps problems, interval time.Duration) []string {
	if m == nil {
		return nil
	}
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, gone := range m.leases.Expired(now) {
		delete(m.byName, gone)
	}
	var old map[string]*missingEpisode
	if o := m.byName[key]; o.uid == uid {
		old = o.episodes
	}
	cur := map[string]*missingEpisode{}
	var notes []string
	for _, p := range ps {
		if p.Reason != retryv1alpha1.ReasonReferenceNotFound || !p.Progress || cur[p.Message] != nil {
			continue
		}
		e := old[p.Message]
		if e == nil || now.Before(e.since) {
			// A clock set back would otherwise add its step to the grace period.
			e = &missingEpisode{since: now, warned: e != nil && e.warned}
		}
		cur[p.Message] = e
		if d := now.Sub(e.since); !e.warned && d >= ReferenceGracePeriod {
			e.warned = true
			notes = append(notes, fmt.Sprintf("%s (missing for %s)", p.Message, d.Round(time.Second)))
		}
	}
	if len(cur) == 0 {
		delete(m.byName, key)
		m.leases.Drop(key)
	} else {
		m.byName[key] = missingOf{uid: uid, episodes: cur}
		m.leases.Renew(key, now, lease.For(interval))
	}
	return notes
}

// len is the number of resources with a reference missing.
func (m *missingReferences) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byName)
}

// warnLongMissing records a Warning ReferenceNotFound on obj (reconciled again within interval) for
// each reference ps reports missing for longer than ReferenceGracePeriod, once per episode.
func (r *topicReconciler) warnLongMissing(obj client.Object, ps problems, interval time.Duration) {
	for _, note := range r.missing.observe(client.ObjectKeyFromObject(obj), obj.GetUID(), ps, interval) {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, retryv1alpha1.ReasonReferenceNotFound, "Reconcile", "%s", note)
	}
}

// firstReady reports whether a True Ready, after before, is the resource's first, reached without
// a Warning on the way (before is absent or a progress reason).
func firstReady(before, _ *metav1.Condition) bool {
	return before == nil || (before.Status != metav1.ConditionTrue && slices.Contains(progressReasons, before.Reason))
}
