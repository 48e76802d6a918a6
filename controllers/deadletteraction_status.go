package controllers

import (
	"context"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// setActionConditions sets an action's Ready, Complete and Stalled conditions from its phase and p,
// the problem that holds it (nil when none):
//   - Pending, held by p: Ready False with p's reason; Stalled True when p is a user error;
//   - Running: Ready False, reason Running (or p's, when the run stopped and will resume);
//   - Succeeded: Ready True and Complete True;
//   - Failed: Ready False, Complete True and Stalled True, with p's reason (kstatus: Failed).
func setActionConditions(st *retryv1alpha1.DeadLetterActionStatus, generation int64, p *problem) {
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: generation})
	}
	progress := func() string {
		return "done " + itoa(st.Done) + " of " + itoa(st.Matched) + " matched, " + itoa(st.Skipped) + " skipped, " + itoa(st.Failed) + " failed"
	}
	switch st.Phase {
	case retryv1alpha1.ActionSucceeded:
		set(retryv1alpha1.ConditionReady, metav1.ConditionTrue, reasonActionSucceeded, "The action completed: "+progress())
		set(retryv1alpha1.ConditionComplete, metav1.ConditionTrue, reasonActionSucceeded, "The action completed")
		meta.RemoveStatusCondition(&st.Conditions, retryv1alpha1.ConditionStalled)
	case retryv1alpha1.ActionFailed:
		set(retryv1alpha1.ConditionReady, metav1.ConditionFalse, p.Reason, p.Message)
		set(retryv1alpha1.ConditionComplete, metav1.ConditionTrue, reasonActionFailed, "The action failed: "+p.Message)
		set(retryv1alpha1.ConditionStalled, metav1.ConditionTrue, p.Reason, p.Message)
	case retryv1alpha1.ActionRunning:
		if p != nil {
			set(retryv1alpha1.ConditionReady, metav1.ConditionFalse, p.Reason, p.Message)
		} else {
			set(retryv1alpha1.ConditionReady, metav1.ConditionFalse, reasonActionRunning, "The action is running: "+progress())
		}
		set(retryv1alpha1.ConditionComplete, metav1.ConditionFalse, reasonActionRunning, "The action is running")
		meta.RemoveStatusCondition(&st.Conditions, retryv1alpha1.ConditionStalled)
	default:
		reason, msg := reasonActionWaiting, "The action has not started"
		if p != nil {
			reason, msg = p.Reason, p.Message
		}
		set(retryv1alpha1.ConditionReady, metav1.ConditionFalse, reason, msg)
		set(retryv1alpha1.ConditionComplete, metav1.ConditionFalse, reason, "The action has not started")
		if p != nil && p.Kind == problemUser {
			set(retryv1alpha1.ConditionStalled, metav1.ConditionTrue, reason, msg)
		} else {
			meta.RemoveStatusCondition(&st.Conditions, retryv1alpha1.ConditionStalled)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// actionRuns are the actions running now, each on its goroutine, and the queue each holds (one
// action that changes a queue at a time), with the backoff of runs that stopped on an error.
type actionRuns struct {
	mu      sync.Mutex
	running map[types.NamespacedName]*actionRun
	holders map[types.NamespacedName]string // queue -> name of the action changing it
	retry   map[types.NamespacedName]actionRetry
	wg      sync.WaitGroup
}

type actionRun struct {
	cancel context.CancelFunc
	queue  types.NamespacedName
	holds  bool
}

type actionRetry struct {
	at    time.Time
	delay time.Duration
}

func newActionRuns() *actionRuns {
	return &actionRuns{running: map[types.NamespacedName]*actionRun{}, holders: map[types.NamespacedName]string{}, retry: map[types.NamespacedName]actionRetry{}}
}

// begin runs fn on a goroutine for action key, holding queue when exclusive. The goroutine's
// context ends with cancel (the action deleted) or stopAll (the manager stops), never with the
// reconcile that started it.
func (rs *actionRuns) begin(key, queue types.NamespacedName, exclusive bool, fn func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	rs.mu.Lock()
	rs.running[key] = &actionRun{cancel: cancel, queue: queue, holds: exclusive}
	if exclusive {
		rs.holders[queue] = key.Name
	}
	rs.wg.Add(1)
	rs.mu.Unlock()
	go func() {
		defer rs.wg.Done()
		defer rs.end(key)
		fn(ctx)
	}()
}

// end forgets a run that returned.
func (rs *actionRuns) end(key types.NamespacedName) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	run, ok := rs.running[key]
	if !ok {
		return
	}
	run.cancel()
	delete(rs.running, key)
	if run.holds && rs.holders[run.queue] == key.Name {
		delete(rs.holders, run.queue)
	}
}

func (rs *actionRuns) isRunning(key types.NamespacedName) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	_, ok := rs.running[key]
	return ok
}

// holder is the action changing queue now, if any.
func (rs *actionRuns) holder(queue types.NamespacedName) (string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	name, ok := rs.holders[queue]
	return name, ok
}

// cancel stops key's run, if any (the action was deleted), and forgets its backoff.
func (rs *actionRuns) cancel(key types.NamespacedName) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if run, ok := rs.running[key]; ok {
		run.cancel()
	}
	delete(rs.retry, key)
}

// stopAll cancels every run and waits for them to return.
func (rs *actionRuns) stopAll() {
	rs.mu.Lock()
	for _, run := range rs.running {
		run.cancel()
	}
	rs.mu.Unlock()
	rs.wg.Wait()
}

// failed records that key's run stopped on an error at now: the next starts after a backoff.
func (rs *actionRuns) failed(key types.NamespacedName, now time.Time) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	d := actionRetryDelay
	if prev, ok := rs.retry[key]; ok {
		d = min(2*prev.delay, actionRetryMax)
	}
	rs.retry[key] = actionRetry{at: now.Add(d), delay: d}
}

// succeeded forgets key's backoff.
func (rs *actionRuns) succeeded(key types.NamespacedName) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.retry, key)
}

// backoff is how long key must still wait before its run starts again (0: now).
func (rs *actionRuns) backoff(key types.NamespacedName, now time.Time) time.Duration {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r, ok := rs.retry[key]; ok && now.Before(r.at) {
		return r.at.Sub(now)
	}
	return 0
}
