package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
)

// DeadLetterActionReconciler runs each DeadLetterAction once: it checks the queue, waits while
// another action changes the same queue, captures the snapshot (the queue's end offsets) when the
// action starts, and runs deadletters.Run on a goroutine of its own that reports progress into
// status and resumes from the checkpoint after a restart. Deleting the action cancels its run.
type DeadLetterActionReconciler struct {
	topicReconciler
	// Factory gives Run its admin clients, scans and produces.
	Factory kafka.ClientFactory
	// RunClock paces replays and progress reports (the real clock when nil).
	RunClock clock.Clock
	runs     *actionRuns
}

// actionRetryDelay is how long an action whose run stopped on an error (Kafka unreachable) waits
// before it resumes from its checkpoint; it doubles up to actionRetryMax.
const actionRetryDelay, actionRetryMax = 2 * time.Second, time.Minute

// actionWaitRequeue is how often a waiting action looks again (another action on its queue, its
// queue not ready yet).
const actionWaitRequeue = 2 * time.Second

// Reasons of a DeadLetterAction's conditions (besides those of api/v1alpha1).
const (
	reasonActionWaiting   = "WaitingForAction"
	reasonActionRunning   = "Running"
	reasonActionSucceeded = "Succeeded"
	reasonActionFailed    = "Failed"
	reasonRunInterrupted  = "RunInterrupted"
)

// actionOwner is an action's name in the connection registry.
func actionOwner(key types.NamespacedName) string { return "DeadLetterAction/" + key.String() }

// actionTargetOwner is the name in the connection registry of an action's replay into pipeline.
func actionTargetOwner(key, pipeline types.NamespacedName) string {
	return actionOwner(key) + "/target/" + pipeline.String()
}

// heldUsers are the registry users one run holds, released together when it ends.
type heldUsers struct {
	registry *kafka.Registry
	mu       sync.Mutex
	names    []string
}

func (h *heldUsers) hold(name string) {
	h.registry.Hold(name)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.names = append(h.names, name)
}

func (h *heldUsers) releaseAll() {
	h.mu.Lock()
	names := h.names
	h.names = nil
	h.mu.Unlock()
	for _, n := range names {
		h.registry.Release(n)
	}
}

// Reconcile starts, resumes or leaves alone one action.
func (r *DeadLetterActionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := &retryv1alpha1.DeadLetterAction{}
	if err := r.Get(ctx, req.NamespacedName, a); err != nil {
		if apierrors.IsNotFound(err) {
			r.runs.cancel(req.NamespacedName) // its connection goes with the registry's lease
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !a.DeletionTimestamp.IsZero() {
		r.runs.cancel(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if a.Status.Phase == retryv1alpha1.ActionSucceeded || a.Status.Phase == retryv1alpha1.ActionFailed {
		r.Kafka.Connections.Release(actionOwner(req.NamespacedName))
		return ctrl.Result{}, nil
	}
	if r.runs.isRunning(req.NamespacedName) {
		return ctrl.Result{}, nil
	}
	if wait := r.runs.backoff(req.NamespacedName, r.Clock.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if _, err := deadletters.Compile(a.Spec.Action, a.Spec.Selector); err != nil {
		// The API server checks the same bounds; an action stored before they were is refused here.
		return ctrl.Result{}, r.fail(ctx, a, &problem{Reason: retryv1alpha1.ReasonInvalidSpec, Kind: problemUser, Message: truncate(err.Error(), maxConditionMessage)})
	}
	if p := r.checkTargetClaim(a); p != nil {
		return ctrl.Result{}, r.fail(ctx, a, p)
	}
	dlq, kc, p := r.resolveQueue(ctx, a)
	if p == nil {
		p = r.checkTurn(ctx, a)
	}
	if p == nil {
		// Once the action's turn has come, just before it runs: the check lists the whole topic
		// ledger, which a waiting action, looked at every few seconds, must not do each time.
		p = r.checkReplayTarget(ctx, a)
	}
	if p != nil && p.Reason == retryv1alpha1.ReasonReplayTargetRefused {
		return ctrl.Result{}, r.fail(ctx, a, p)
	}
	if p != nil {
		if err := r.patchActionStatus(ctx, a, func(st *retryv1alpha1.DeadLetterActionStatus) {
			if st.Phase == "" {
				st.Phase = retryv1alpha1.ActionPending
			}
			setActionConditions(st, a.Generation, p)
		}); err != nil {
			return ctrl.Result{}, err
		}
		if p.Kind == problemTransient {
			return ctrl.Result{}, p
		}
		return ctrl.Result{RequeueAfter: actionWaitRequeue}, nil
	}
	if len(a.Status.Snapshot) == 0 {
		if err := r.capture(ctx, a, dlq, kc); err != nil {
			return ctrl.Result{}, err
		}
	}
	r.start(ctx, a, dlq, kc.conn)
	return ctrl.Result{}, nil
}

// resolveQueue finds the action's queue, which must manage its topic and have its record of
// decisions, and connects to its cluster.
func (r *DeadLetterActionReconciler) resolveQueue(ctx context.Context, a *retryv1alpha1.DeadLetterAction) (*retryv1alpha1.DeadLetterQueue, *kafkaClient, *problem) {
	dlq := &retryv1alpha1.DeadLetterQueue{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.Queue}, dlq); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil, &problem{Reason: retryv1alpha1.ReasonReferenceNotFound, Kind: problemWaiting, Message: fmt.Sprintf(
				"DeadLetterQueue %q not found in namespace %s: an action acts on a queue of its own namespace; create the queue or fix spec.queue", a.Spec.Queue, a.Namespace)}
		}
		return nil, nil, &problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err, Message: err.Error()}
	}
	topic := string(dlq.Spec.Topic.Name)
	// A ledger record from before the claim policy gives the topic to another namespace holds nothing.
	if p := r.claimProblem(dlq, topic); p != nil {
		p.Message = truncate(fmt.Sprintf("DeadLetterQueue %q: %s; actions run only on a topic the claim policy gives the queue", dlq.Name, p.Message), maxConditionMessage)
		return nil, nil, p
	}
	owned, err := r.Ledger.Owns(ctx, dlq, topic)
	if err != nil {
		return nil, nil, &problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err, Message: err.Error()}
	}
	if !owned {
		return nil, nil, &problem{Reason: retryv1alpha1.ReasonTopicNotOwned, Kind: problemWaiting, Message: fmt.Sprintf(
			"DeadLetterQueue %q does not manage its topic %q (see its TopicReady condition): actions run only on a topic the operator created or adopted", dlq.Name, topic)}
	}
	if dlq.Status.StateTopic == "" {
		return nil, nil, &problem{Reason: retryv1alpha1.ReasonReconciling, Kind: problemWaiting, Message: fmt.Sprintf(
			"DeadLetterQueue %q has no record of decisions yet (status.stateTopic): the action starts once the queue has made it", dlq.Name)}
	}
	kc := &kafkaClient{}
	if err := r.connect(ctx, kc, actionOwner(client.ObjectKeyFromObject(a)), dlq.Namespace, dlq.Spec.Kafka); err != nil {
		var p *problem
		if errors.As(err, &p) {
			return nil, nil, p
		}
		return nil, nil, &problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err, Message: err.Error()}
	}
	return dlq, kc, nil
}

// checkTurn makes actions that change a queue run one at a time, in the order they were created
// (a dry run changes nothing and never waits): it returns a problem naming the action to wait for.
func (r *DeadLetterActionReconciler) checkTurn(ctx context.Context, a *retryv1alpha1.DeadLetterAction) *problem {
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		return nil
	}
	queue := types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.Queue}
	if holder, ok := r.runs.holder(queue); ok && holder != a.Name {
		return waitFor(holder, a.Spec.Queue, "running")
	}
	list := &retryv1alpha1.DeadLetterActionList{}
	if err := r.List(ctx, list, client.InNamespace(a.Namespace)); err != nil {
		return &problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err, Message: err.Error()}
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == a.UID || o.Spec.Queue != a.Spec.Queue || o.Spec.Mode == retryv1alpha1.ActionModeDryRun || !o.DeletionTimestamp.IsZero() ||
			o.Status.Phase == retryv1alpha1.ActionSucceeded || o.Status.Phase == retryv1alpha1.ActionFailed {
			continue
		}
		if o.Status.Phase == retryv1alpha1.ActionRunning {
			return waitFor(o.Name, a.Spec.Queue, "running")
		}
		if actionBefore(o, a) {
			return waitFor(o.Name, a.Spec.Queue, "created earlier")
		}
	}
	return nil
}

func waitFor(other, queue, why string) *problem {
	return &problem{Reason: reasonActionWaiting, Kind: problemWaiting, Message: fmt.Sprintf(
		"waiting for DeadLetterAction %s (%s), which changes queue %s: actions on one queue run one at a time", other, why, queue)}
}

// actionBefore orders actions by creation, then name.
func actionBefore(x, y *retryv1alpha1.DeadLetterAction) bool {
	if !x.CreationTimestamp.Equal(&y.CreationTimestamp) {
		return x.CreationTimestamp.Before(&y.CreationTimestamp)
	}
	return x.Name < y.Name
}

// capture records the snapshot (the queue's end offsets now) and marks the action Running.
func (r *DeadLetterActionReconciler) capture(ctx context.Context, a *retryv1alpha1.DeadLetterAction, dlq *retryv1alpha1.DeadLetterQueue, kc *kafkaClient) error {
	topic := string(dlq.Spec.Topic.Name)
	offsets, err := kc.admin.ListOffsets(ctx, topic)
	if err != nil {
		return err
	}
	ends := map[int32]int64{}
	for _, o := range offsets[topic] {
		ends[o.Partition] = o.End
	}
	now := metav1.NewTime(r.Clock.Now())
	err = r.patchActionStatus(ctx, a, func(st *retryv1alpha1.DeadLetterActionStatus) {
		st.Snapshot = deadletters.OffsetsToStatus(ends)
		st.Phase, st.StartTime = retryv1alpha1.ActionRunning, &now
		setActionConditions(st, a.Generation, nil)
	})
	if err == nil {
		ctrl.LoggerFrom(ctx).Info("Started dead-letter action", "deadLetterAction", klog.KObj(a), "action", a.Spec.Action, "queue", a.Spec.Queue, "mode", a.Spec.Mode)
	}
	return err
}

// start runs the action on its own goroutine, which outlives the reconcile and stops when the
// action is deleted or the manager stops.
func (r *DeadLetterActionReconciler) start(ctx context.Context, a *retryv1alpha1.DeadLetterAction, dlq *retryv1alpha1.DeadLetterQueue, conn kafka.Connection) {
	key := client.ObjectKeyFromObject(a)
	queue := types.NamespacedName{Namespace: a.Namespace, Name: a.Spec.Queue}
	log := ctrl.LoggerFrom(ctx).WithValues("deadLetterAction", klog.KObj(a))
	exclusive := a.Spec.Mode != retryv1alpha1.ActionModeDryRun
	// A run asks for its connections once (the queue's, each target pipeline's) and may hold them
	// for hours: past the registry's lease, until the run ends.
	held := &heldUsers{registry: r.Kafka.Connections}
	held.hold(actionOwner(key))
	r.runs.begin(key, queue, exclusive, func(runCtx context.Context) {
		defer held.releaseAll()
		o := deadletters.Options{
			Spec: a.Spec, Ref: deadletters.ActionRef{Namespace: a.Namespace, Name: a.Name, UID: string(a.UID)},
			Topic: string(dlq.Spec.Topic.Name), Conn: conn, Kafka: r.Kafka.replayFactory(r.Factory, r.Client), Clock: r.RunClock,
			Snapshot: deadletters.OffsetsFromStatus(a.Status.Snapshot), Resume: deadletters.FromStatus(&a.Status),
			Target: r.replayTarget(a, conn, held), Holders: r.topicHolders,
			OnProgress: func(p deadletters.Progress) {
				if err := r.patchActionStatus(runCtx, a, func(st *retryv1alpha1.DeadLetterActionStatus) {
					p.ApplyTo(st)
					setActionConditions(st, a.Generation, nil)
				}); err != nil {
					log.Error(err, "Could not record the action's progress")
				}
			},
		}
		if len(a.Status.Checkpoint) == 0 {
			o.Resume = nil
		}
		prog, err := deadletters.Run(runCtx, o)
		r.finish(runCtx, log, a, prog, err)
	})
}

// finish records how a run ended: Succeeded, or, on an error (Kafka unreachable, a produce
// refused), still Running with the error in its conditions, resumed from its checkpoint after a
// backoff.
func (r *DeadLetterActionReconciler) finish(ctx context.Context, log logr.Logger, a *retryv1alpha1.DeadLetterAction, prog deadletters.Progress, err error) {
	key := client.ObjectKeyFromObject(a)
	if ctx.Err() != nil {
		return // deleted, or the manager stops: the checkpoint in status is where it resumes
	}
	now := metav1.NewTime(r.Clock.Now())
	writeErr := r.patchActionStatus(ctx, a, func(st *retryv1alpha1.DeadLetterActionStatus) {
		prog.ApplyTo(st)
		if err == nil {
			st.Phase, st.CompletionTime = retryv1alpha1.ActionSucceeded, &now
			setActionConditions(st, a.Generation, nil)
			return
		}
		setActionConditions(st, a.Generation, &problem{Reason: reasonRunInterrupted, Kind: problemTransient, Message: truncate(
			fmt.Sprintf("the run stopped (%v); it resumes from its checkpoint", err), maxConditionMessage)})
	})
	if writeErr != nil {
		log.Error(writeErr, "Could not record the end of the action's run")
	}
	if err != nil {
		r.runs.failed(key, r.Clock.Now())
		log.Info("Dead-letter action interrupted, resuming later", "error", err.Error())
		return
	}
	r.runs.succeeded(key)
	result := "Succeeded"
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		result = "DryRun"
	}
	r.Metrics.CountDeadLetterAction(string(a.Spec.Action), result, prog.Done)
	log.Info("Completed dead-letter action", "matched", prog.Matched, "done", prog.Done, "skipped", prog.Skipped, "failed", prog.Failed)
	r.Recorder.Eventf(a, nil, corev1.EventTypeNormal, reasonActionSucceeded, "Run", "%s %s: %d of %d matched dead letters done, %d skipped, %d failed",
		a.Spec.Action, modeNote(a), prog.Done, prog.Matched, prog.Skipped, prog.Failed)
}

// fail ends an action that cannot run (phase Failed) with a Warning event.
func (r *DeadLetterActionReconciler) fail(ctx context.Context, a *retryv1alpha1.DeadLetterAction, p *problem) error {
	now := metav1.NewTime(r.Clock.Now())
	if err := r.patchActionStatus(ctx, a, func(st *retryv1alpha1.DeadLetterActionStatus) {
		st.Phase, st.CompletionTime = retryv1alpha1.ActionFailed, &now
		setActionConditions(st, a.Generation, p)
	}); err != nil {
		return err
	}
	r.Metrics.CountDeadLetterAction(string(a.Spec.Action), "Failed", 0)
	r.Recorder.Eventf(a, nil, corev1.EventTypeWarning, p.Reason, "Run", "%s", p.Message)
	return nil
}

func modeNote(a *retryv1alpha1.DeadLetterAction) string {
	if a.Spec.Mode == retryv1alpha1.ActionModeDryRun {
		return "(dry run, nothing changed)"
	}
	return "on queue " + a.Spec.Queue
}

// patchActionStatus re-reads the action and merge-patches its status with set applied; the
// progress string follows the counts.
func (r *DeadLetterActionReconciler) patchActionStatus(ctx context.Context, a *retryv1alpha1.DeadLetterAction, set func(*retryv1alpha1.DeadLetterActionStatus)) error {
	cur := &retryv1alpha1.DeadLetterAction{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(a), cur); err != nil {
		return client.IgnoreNotFound(err)
	}
	before := cur.DeepCopy()
	set(&cur.Status)
	cur.Status.ObservedGeneration = cur.Generation
	cur.Status.Progress = fmt.Sprintf("%d/%d", cur.Status.Done, cur.Status.Matched)
	if err := r.Status().Patch(ctx, cur, client.MergeFrom(before)); err != nil {
		return client.IgnoreNotFound(err)
	}
	a.Status = cur.Status
	return nil
}

// SetupWithManager registers the controller, and a runnable that stops every run when the manager
// stops.
func (r *DeadLetterActionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.runs.stopAll()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&retryv1alpha1.DeadLetterAction{}).
		WithOptions(r.Controller).
		Complete(r)
}

// replayTarget is where a Replay sends each dead letter (deadletters.Targets: spec.target's topic on
// the queue's cluster, or the first retry tier of spec.target's pipeline or of the pipeline named in
// the dead letter, of the action's namespace only; never the shared source topic).
func (r *DeadLetterActionReconciler) replayTarget(a *retryv1alpha1.DeadLetterAction, queueConn kafka.Connection, held *heldUsers) func(context.Context, *deadletters.Entry) (deadletters.Target, error) {
	if a.Spec.Action != retryv1alpha1.DeadLetterReplay {
		return nil
	}
	return deadletters.Targets(a.Spec.Target, a.Namespace, queueConn, func(ctx context.Context, namespace, name string) (deadletters.Target, error) {
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return deadletters.Target{}, fmt.Errorf("%w: pipeline %s/%s not found", deadletters.ErrNoTarget, namespace, name)
			}
			return deadletters.Target{}, err
		}
		if p.Status.Topics == nil || len(p.Status.Topics.Retries) == 0 {
			return deadletters.Target{}, fmt.Errorf("%w: pipeline %s/%s has no retry topic to replay through", deadletters.ErrNoTarget, namespace, name)
		}
		// Only a tier the pipeline manages (its ledger record holds it): a pipeline that lost a
		// conflict may list a tier another resource holds, which another consumer group reads.
		tier := p.Status.Topics.Retries[0].Name
		if owned, err := r.Ledger.Owns(ctx, p, tier); err != nil || !owned {
			if err != nil {
				return deadletters.Target{}, err
			}
			return deadletters.Target{}, fmt.Errorf("%w: pipeline %s/%s does not manage the retry topic %s (see its TopicsReady condition)", deadletters.ErrNoTarget, namespace, name, tier)
		}
		// Nor one another resource took since (a queue adopting it as its dead-letter topic): the
		// replayed records would land there. Once per pipeline and run (Targets remembers).
		holders, err := r.Ledger.Holders(ctx, tier)
		if err != nil {
			return deadletters.Target{}, err
		}
		for _, h := range holders {
			if h.Kind != "ConsumerPipeline" || h.Namespace != p.Namespace || h.Name != p.Name {
				return deadletters.Target{}, fmt.Errorf("%w: the retry topic %s of pipeline %s/%s is also held by %s", deadletters.ErrNoTarget, tier, namespace, name, h)
			}
		}
		// A user of its own per target, so that the queue's connection stays the action's own.
		kc, owner := &kafkaClient{}, actionTargetOwner(client.ObjectKeyFromObject(a), client.ObjectKeyFromObject(p))
		if err := r.connect(ctx, kc, owner, p.Namespace, p.Spec.Kafka); err != nil {
			return deadletters.Target{}, err
		}
		held.hold(owner)
		return deadletters.Target{Topic: tier, Conn: kc.conn}, nil
	})
}
