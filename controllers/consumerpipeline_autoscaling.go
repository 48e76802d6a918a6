package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
)

// The manager's --autoscaler choices.
const (
	// AutoscalerAuto makes a ScaledObject when KEDA's kind is served, else an HPA.
	AutoscalerAuto = "auto"
	// AutoscalerHPA always makes an HPA on the operator's external metric.
	AutoscalerHPA = "hpa"
	// AutoscalerKEDA always makes a KEDA ScaledObject.
	AutoscalerKEDA = "keda"
)

const (
	eventScaledToZero = "ScaledToZero"
	eventWoke         = "Woke"
	// kedaLookupInterval is how long the answer to "is KEDA's ScaledObject served?" is kept.
	kedaLookupInterval = time.Minute
)

// kindServed answers whether a kind is served, asking the RESTMapper at most once per interval
// (a missing group costs a discovery round at each question): KEDA installed or removed is noticed
// within a minute.
type kindServed struct {
	mapper meta.RESTMapper
	gvk    schema.GroupVersionKind

	mu     sync.Mutex
	served bool
	asked  time.Time
}

func (k *kindServed) get(now time.Time) (bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.asked.IsZero() && now.Sub(k.asked) < kedaLookupInterval {
		return k.served, nil
	}
	_, err := k.mapper.RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
	switch {
	case err == nil:
		k.served = true
	case meta.IsNoMatchError(err):
		k.served = false
	default:
		return false, err
	}
	k.asked = now
	return k.served, nil
}

// reconcileAutoscaling makes the pipeline's autoscaler (spec.autoscaling): a KEDA ScaledObject or an
// HPA, both on the pipeline's scale subresource, and removes the other kind; without
// spec.autoscaling it removes both. With minReplicas 0 it then decides whether the pipeline idles at
// zero pods (decideIdle), which the Deployment step renders. A failure with the autoscaler is a
// transient problem, not the end of the steps: the Deployment step must still run, so that an idle
// pipeline wakes and spec.replicas is followed; it is recorded in ps.
//
// It returns status.autoscaling, from cur (the previous status's), and when an idle pipeline must be
// looked at again to wake (zero: no need). t sizes the autoscaler (largestPartitions); live has the
// figures an idle pipeline wakes on; refused, when set, removes the autoscalers.
func (r *ConsumerPipelineReconciler) reconcileAutoscaling(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, refused *problem, t pipelineTopics, live pipelineLive,
	cur *retryv1alpha1.PipelineAutoscalingStatus, ps *problems) (*retryv1alpha1.PipelineAutoscalingStatus, time.Duration) {
	a := render.AutoscalingOf(p, t.largestPartitions())
	if a == nil || refused != nil {
		if cur != nil {
			// Kept (for the kind left to delete) only until the removal succeeds; never idle.
			cur.State, cur.LastActiveTime, cur.WakeTime = retryv1alpha1.AutoscalingActive, nil, nil
		}
		if err := r.removeAutoscalers(ctx, p, ""); err != nil {
			autoscalerFailed(ps, err)
			return cur, 0
		}
		return nil, 0
	}
	prev := p.Status.Autoscaling
	st := &retryv1alpha1.PipelineAutoscalingStatus{Name: a.Name, MinReplicas: a.Min, MaxReplicas: a.Max}
	if a.Capped {
		st.Partitions = &a.Partitions
	}
	if prev != nil {
		st.Kind, st.State, st.LastActiveTime, st.WakeTime, st.LastScaleTime = prev.Kind, prev.State, prev.LastActiveTime, prev.WakeTime, prev.LastScaleTime
	}
	keda, err := r.useKEDA()
	trouble := ""
	if err == nil {
		st.Kind = retryv1alpha1.AutoscalerHPA
		if keda {
			st.Kind = retryv1alpha1.AutoscalerKEDA
		}
		trouble, err = r.applyAutoscaler(ctx, p, st.Kind, a, keda, ps)
	}
	autoscalerFailed(ps, err)
	wakeAfter := r.decideIdle(ctx, p, st, a, live)
	st.Message = autoscalingMessage(p, a, st, trouble)
	return st, wakeAfter
}

// applyAutoscaler removes the autoscaler of the other kind than kind, then applies the one wanted,
// and says what keeps it from scaling ("" when nothing does). The other kind goes first: KEDA's
// webhook refuses a ScaledObject while an HPA it does not own scales the same pipeline.
func (r *ConsumerPipelineReconciler) applyAutoscaler(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, kind retryv1alpha1.AutoscalerKind, a *render.Autoscaling, keda bool, ps *problems) (string, error) {
	if err := r.removeAutoscalers(ctx, p, kind); err != nil {
		return "", err
	}
	if keda {
		return "", r.applyScaledObject(ctx, p, a, ps)
	}
	return r.applyHPA(ctx, p, a, ps)
}

// autoscalerFailed records err, a failure to apply or remove the autoscaler, in ps as a transient
// problem of DeploymentReady (the work queue retries with backoff).
func autoscalerFailed(ps *problems, err error) {
	if err == nil {
		return
	}
	err = fmt.Errorf("autoscaler: %w", err)
	ps.add(&problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err,
		Message: truncate(err.Error(), maxConditionMessage)})
}

// useKEDA says which kind of autoscaler to make (the manager's --autoscaler).
func (r *ConsumerPipelineReconciler) useKEDA() (bool, error) {
	switch r.Autoscaler {
	case AutoscalerHPA:
		return false, nil
	case AutoscalerKEDA:
		return true, nil
	}
	if r.keda == nil {
		return false, nil
	}
	served, err := r.keda.get(r.Clock.Now())
	if err != nil {
		return false, fmt.Errorf("looking up %s: %w", render.ScaledObjectGVK.GroupKind(), err)
	}
	return served, nil
}

// applyHPA applies the HorizontalPodAutoscaler of the pipeline, and says what keeps the one that
// exists from scaling (hpaTrouble).
func (r *ConsumerPipelineReconciler) applyHPA(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, a *render.Autoscaling, ps *problems) (string, error) {
	hpa := render.HorizontalPodAutoscaler(p, a)
	live := apply.Cached(ctx, r.Client, client.ObjectKeyFromObject(hpa), &autoscalingv2.HorizontalPodAutoscaler{})
	_, applied, err := apply.Owned(ctx, r.Client, r.Applied, p, hpa, live)
	if err != nil {
		return "", recordProblem(ps, childProblem(err))
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Applied HorizontalPodAutoscaler", "consumerPipeline", klog.KObj(p), "horizontalPodAutoscaler", hpa.Name)
	}
	if cur, ok := live.(*autoscalingv2.HorizontalPodAutoscaler); ok {
		return hpaTrouble(cur), nil
	}
	return "", nil
}

// hpaTrouble is what keeps an HPA from scaling, from its conditions (AbleToScale or ScalingActive
// False: the metric cannot be read, the scale subresource cannot be), in words; empty when nothing.
func hpaTrouble(h *autoscalingv2.HorizontalPodAutoscaler) string {
	for _, t := range []autoscalingv2.HorizontalPodAutoscalerConditionType{autoscalingv2.AbleToScale, autoscalingv2.ScalingActive} {
		for _, c := range h.Status.Conditions {
			if c.Type == t && c.Status == corev1.ConditionFalse && c.Reason != "ScalingDisabled" {
				return fmt.Sprintf("the HorizontalPodAutoscaler cannot scale (%s %s: %s)", c.Type, c.Reason, truncate(c.Message, 300))
			}
		}
	}
	return ""
}

// applyScaledObject applies the KEDA ScaledObject of the pipeline. ScaledObjects are not cached
// (the kind may come and go): the live one is read from the API server to compare.
func (r *ConsumerPipelineReconciler) applyScaledObject(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, a *render.Autoscaling, ps *problems) error {
	so := render.ScaledObject(p, a, r.KEDAPrometheusAddress)
	var live client.Object
	if r.APIReader != nil {
		cur := &unstructured.Unstructured{}
		cur.SetGroupVersionKind(render.ScaledObjectGVK)
		switch err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(so), cur); {
		case err == nil:
			live = cur
		case !apierrors.IsNotFound(err):
			return err
		}
	}
	_, applied, err := apply.Owned(ctx, r.Client, r.Applied, p, so, live)
	if err != nil {
		return recordProblem(ps, childProblem(err))
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Applied ScaledObject", "consumerPipeline", klog.KObj(p), "scaledObject", so.GetName())
	}
	return nil
}

// removeAutoscalers deletes the autoscalers of the pipeline other than keep ("" for all) that it
// controls.
func (r *ConsumerPipelineReconciler) removeAutoscalers(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, keep retryv1alpha1.AutoscalerKind) error {
	name := render.AutoscalerName(p)
	key := client.ObjectKey{Namespace: p.Namespace, Name: name}
	if keep != retryv1alpha1.AutoscalerHPA {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := r.Get(ctx, key, hpa); err == nil && metav1.IsControlledBy(hpa, p) {
			if err := client.IgnoreNotFound(r.Delete(ctx, hpa)); err != nil {
				return err
			}
			ctrl.LoggerFrom(ctx).Info("Deleted HorizontalPodAutoscaler", "consumerPipeline", klog.KObj(p), "horizontalPodAutoscaler", name)
		} else if client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	if keep != retryv1alpha1.AutoscalerKEDA && p.Status.Autoscaling != nil && p.Status.Autoscaling.Kind == retryv1alpha1.AutoscalerKEDA && r.APIReader != nil {
		so := &unstructured.Unstructured{}
		so.SetGroupVersionKind(render.ScaledObjectGVK)
		err := r.APIReader.Get(ctx, key, so)
		switch {
		case err == nil && metav1.IsControlledBy(so, p):
			if err := client.IgnoreNotFound(r.Delete(ctx, so)); err != nil {
				return err
			}
			ctrl.LoggerFrom(ctx).Info("Deleted ScaledObject", "consumerPipeline", klog.KObj(p), "scaledObject", name)
		case err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
			return err
		}
	}
	return nil
}

// decideIdle decides, for a pipeline that may scale to zero, whether it runs no pod now
// (st.state Idle, rendered by the Deployment step as 0 replicas): when nothing has been due
// (status.dueLag 0) for the scale-down stabilization window, and no record waiting in a retry tier
// can come due within the wake lead. It wakes as soon as the due lag is not 0 (a refresh found
// source records), or at wakeTime, wakeLead before the earliest time a waiting record can come due;
// the reconcile is requeued for then (the duration returned; zero when no wake is due). Waking
// counts as activity, so the woken consumer stays for a window even if what it woke for is delivered
// between two refreshes.
func (r *ConsumerPipelineReconciler) decideIdle(ctx context.Context, p *retryv1alpha1.ConsumerPipeline, st *retryv1alpha1.PipelineAutoscalingStatus, a *render.Autoscaling, live pipelineLive) time.Duration {
	wasIdle := st.IsIdle()
	if !a.ScaleToZero {
		st.State, st.LastActiveTime, st.WakeTime = retryv1alpha1.AutoscalingActive, nil, nil
		return 0
	}
	now := r.Clock.Now()
	// Figures not read by this reconcile (a topic step's problem, a failed read) are unknown, not
	// the stale value in status: asleep on them, source records would wait as long as the problem.
	var dueLag *int64
	if live.lagRead {
		dueLag = live.dueLag
	}
	if live.earliestRead {
		st.WakeTime = nil
		if live.earliestDue != nil {
			st.WakeTime = &metav1.Time{Time: live.earliestDue.Add(-a.WakeLead).Truncate(time.Second)}
		}
	}
	active := dueLag == nil || *dueLag > 0
	woken := wasIdle && st.WakeTime != nil && !now.Before(st.WakeTime.Time)
	if active || woken || st.LastActiveTime == nil {
		st.LastActiveTime = &metav1.Time{Time: now.Truncate(time.Second)}
	}
	quiet := now.Sub(st.LastActiveTime.Time)
	idle := !active && !woken && quiet >= a.ScaleDownStabilization && (st.WakeTime == nil || now.Before(st.WakeTime.Time))
	st.State = retryv1alpha1.AutoscalingActive
	if idle {
		st.State = retryv1alpha1.AutoscalingIdle
	}
	var wakeAfter time.Duration
	if idle && st.WakeTime != nil {
		wakeAfter = st.WakeTime.Sub(now)
	}
	switch {
	case idle && !wasIdle:
		wakes := "when records arrive"
		if st.WakeTime != nil {
			wakes = "at " + st.WakeTime.UTC().Format(time.RFC3339) + " (before the earliest waiting retry is due) or when records arrive"
		}
		ctrl.LoggerFrom(ctx).Info("Scaling consumers to zero: nothing due", "consumerPipeline", klog.KObj(p), "quietFor", quiet.String(), "wakeTime", st.WakeTime)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventScaledToZero, "Autoscale",
			"Nothing due for %s: consumers scaled to 0; they start again %s", quiet.Round(time.Second), wakes)
	case !idle && wasIdle:
		why := "records are due (due lag " + formatCount(dueLag) + ")"
		if woken {
			why = "a waiting retry comes due at " + st.WakeTime.Add(a.WakeLead).UTC().Format(time.RFC3339)
		}
		ctrl.LoggerFrom(ctx).Info("Waking consumers", "consumerPipeline", klog.KObj(p), "why", why)
		r.Recorder.Eventf(p, nil, corev1.EventTypeNormal, eventWoke, "Autoscale", "Consumers started again: %s", why)
	}
	return wakeAfter
}

func formatCount(n *int64) string {
	if n == nil {
		return "unknown"
	}
	return fmt.Sprint(*n)
}

// autoscalingMessage says what the autoscaler does, in words.
func autoscalingMessage(p *retryv1alpha1.ConsumerPipeline, a *render.Autoscaling, st *retryv1alpha1.PipelineAutoscalingStatus, trouble string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s scales the pipeline between %d and %d pods, one per %d records due", st.Kind, st.Name, a.Min, a.Max, a.Target)
	if m := a.CapMessage(p); m != "" {
		b.WriteString("; " + m)
	}
	if trouble != "" {
		b.WriteString("; " + trouble)
	}
	if a.ScaleToZero {
		fmt.Fprintf(&b, "; at 0 pods after %s with nothing due", a.ScaleDownStabilization)
		if st.IsIdle() {
			b.WriteString(" (now idle")
			if st.WakeTime != nil {
				b.WriteString(", wakes at " + st.WakeTime.UTC().Format(time.RFC3339))
			}
			b.WriteString(")")
		}
	}
	return truncate(b.String(), maxConditionMessage)
}
