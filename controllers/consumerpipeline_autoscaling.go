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

// largestPartitions is the partition count of the pipeline's largest topic (the source and the
// retry tiers it consumes): more consumers than that leave some with nothing to read. 0 when unknown.
func (s *pipelineScope) largestPartitions() int32 {
	n := s.sourcePartitions
	for _, t := range s.retries {
		n = max(n, t.Partitions)
	}
	return n
}

// reconcileAutoscaling makes the pipeline's autoscaler (spec.autoscaling): a KEDA ScaledObject or an
// HPA, both on the pipeline's scale subresource, and removes the other kind; without
// spec.autoscaling it removes both. With minReplicas 0 it then decides whether the pipeline idles at
// zero pods (decideIdle), which the Deployment step renders. A failure with the autoscaler is a
// transient problem, not the end of the steps: the Deployment step must still run, so that an idle
// pipeline wakes and spec.replicas is followed.
func (r *ConsumerPipelineReconciler) reconcileAutoscaling(ctx context.Context, s *pipelineScope) error {
	a := render.AutoscalingOf(s.p, s.largestPartitions())
	if a == nil || s.claimRefused != nil {
		if s.autoscaling != nil {
			// Kept (for the kind left to delete) only until the removal succeeds; never idle.
			s.autoscaling.State, s.autoscaling.LastActiveTime, s.autoscaling.WakeTime = retryv1alpha1.AutoscalingActive, nil, nil
		}
		autoscalerFailed(s, r.removeAutoscalers(ctx, s, ""))
		return nil
	}
	prev := s.p.Status.Autoscaling
	st := &retryv1alpha1.PipelineAutoscalingStatus{Name: a.Name, MinReplicas: a.Min, MaxReplicas: a.Max}
	if a.Capped {
		st.Partitions = &a.Partitions
	}
	if prev != nil {
		st.Kind, st.State, st.LastActiveTime, st.WakeTime, st.LastScaleTime = prev.Kind, prev.State, prev.LastActiveTime, prev.WakeTime, prev.LastScaleTime
	}
	s.autoscaling = st
	keda, err := r.useKEDA()
	if err == nil {
		st.Kind = retryv1alpha1.AutoscalerHPA
		if keda {
			st.Kind = retryv1alpha1.AutoscalerKEDA
		}
		err = r.applyAutoscaler(ctx, s, a, keda)
	}
	autoscalerFailed(s, err)
	r.decideIdle(ctx, s, a)
	st.Message = autoscalingMessage(s.p, a, st, s.autoscalerTrouble)
	return nil
}

// applyAutoscaler removes the autoscaler of the other kind, then applies the one wanted. The other
// kind goes first: KEDA's webhook refuses a ScaledObject while an HPA it does not own scales the
// same pipeline.
func (r *ConsumerPipelineReconciler) applyAutoscaler(ctx context.Context, s *pipelineScope, a *render.Autoscaling, keda bool) error {
	if err := r.removeAutoscalers(ctx, s, s.autoscaling.Kind); err != nil {
		return err
	}
	if keda {
		return r.applyScaledObject(ctx, s, a)
	}
	return r.applyHPA(ctx, s, a)
}

// autoscalerFailed records err, a failure to apply or remove the autoscaler, as a transient problem
// of DeploymentReady (the work queue retries with backoff).
func autoscalerFailed(s *pipelineScope, err error) {
	if err == nil {
		return
	}
	err = fmt.Errorf("autoscaler: %w", err)
	s.deploymentProblems.add(&problem{Reason: retryv1alpha1.ReasonReconcileError, Kind: problemTransient, Err: err,
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

// applyHPA applies the HorizontalPodAutoscaler of the pipeline.
func (r *ConsumerPipelineReconciler) applyHPA(ctx context.Context, s *pipelineScope, a *render.Autoscaling) error {
	hpa := render.HorizontalPodAutoscaler(s.p, a)
	live := apply.Cached(ctx, r.Client, client.ObjectKeyFromObject(hpa), &autoscalingv2.HorizontalPodAutoscaler{})
	_, applied, err := apply.Owned(ctx, r.Client, s.p, hpa, live)
	if err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Applied HorizontalPodAutoscaler", "consumerPipeline", klog.KObj(s.p), "horizontalPodAutoscaler", hpa.Name)
	}
	if cur, ok := live.(*autoscalingv2.HorizontalPodAutoscaler); ok {
		s.autoscalerTrouble = hpaTrouble(cur)
	}
	return nil
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
func (r *ConsumerPipelineReconciler) applyScaledObject(ctx context.Context, s *pipelineScope, a *render.Autoscaling) error {
	so := render.ScaledObject(s.p, a, r.KEDAPrometheusAddress)
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
	_, applied, err := apply.Owned(ctx, r.Client, s.p, so, live)
	if err != nil {
		return recordProblem(&s.deploymentProblems, childProblem(err))
	}
	if applied {
		ctrl.LoggerFrom(ctx).Info("Applied ScaledObject", "consumerPipeline", klog.KObj(s.p), "scaledObject", so.GetName())
	}
	return nil
}

// removeAutoscalers deletes the autoscalers of the pipeline other than keep ("" for all) that it
// controls.
func (r *ConsumerPipelineReconciler) removeAutoscalers(ctx context.Context, s *pipelineScope, keep retryv1alpha1.AutoscalerKind) error {
	name := render.AutoscalerName(s.p)
	key := client.ObjectKey{Namespace: s.p.Namespace, Name: name}
	if keep != retryv1alpha1.AutoscalerHPA {
		hpa := &autoscalingv2.HorizontalPodAutoscaler{}
		if err := r.Get(ctx, key, hpa); err == nil && metav1.IsControlledBy(hpa, s.p) {
			if err := client.IgnoreNotFound(r.Delete(ctx, hpa)); err != nil {
				return err
			}
			ctrl.LoggerFrom(ctx).Info("Deleted HorizontalPodAutoscaler", "consumerPipeline", klog.KObj(s.p), "horizontalPodAutoscaler", name)
		} else if client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	if keep != retryv1alpha1.AutoscalerKEDA && s.p.Status.Autoscaling != nil && s.p.Status.Autoscaling.Kind == retryv1alpha1.AutoscalerKEDA && r.APIReader != nil {
		so := &unstructured.Unstructured{}
		so.SetGroupVersionKind(render.ScaledObjectGVK)
		err := r.APIReader.Get(ctx, key, so)
		switch {
		case err == nil && metav1.IsControlledBy(so, s.p):
			if err := client.IgnoreNotFound(r.Delete(ctx, so)); err != nil {
				return err
			}
			ctrl.LoggerFrom(ctx).Info("Deleted ScaledObject", "consumerPipeline", klog.KObj(s.p), "scaledObject", name)
		case err != nil && !apierrors.IsNotFound(err) && !meta.IsNoMatchError(err):
			return err
		}
	}
	if keep == "" {
		s.autoscaling = nil
	}
	return nil
}

// decideIdle decides, for a pipeline that may scale to zero, whether it runs no pod now
// (s.autoscaling.idle, rendered by the Deployment step as 0 replicas): when nothing has been due
// (status.dueLag 0) for the scale-down stabilization window, and no record waiting in a retry tier
// can come due within the wake lead. It wakes as soon as the due lag is not 0 (a refresh found
// source records), or at wakeTime, wakeLead before the earliest time a waiting record can come due;
// the reconcile is requeued for then (s.wakeAfter). Waking counts as activity, so the woken
// consumer stays for a window even if what it woke for is delivered between two refreshes.
func (r *ConsumerPipelineReconciler) decideIdle(ctx context.Context, s *pipelineScope, a *render.Autoscaling) {
	st := s.autoscaling
	wasIdle := st.IsIdle()
	if !a.ScaleToZero {
		st.State, st.LastActiveTime, st.WakeTime = retryv1alpha1.AutoscalingActive, nil, nil
		return
	}
	now := r.Clock.Now()
	// Figures not read by this reconcile (a topic step's problem, a failed read) are unknown, not
	// the stale value in status: asleep on them, source records would wait as long as the problem.
	var dueLag *int64
	if s.live.lagRead {
		dueLag = s.live.dueLag
	}
	if s.live.earliestRead {
		st.WakeTime = nil
		if s.live.earliestDue != nil {
			st.WakeTime = &metav1.Time{Time: s.live.earliestDue.Add(-a.WakeLead).Truncate(time.Second)}
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
	if idle && st.WakeTime != nil {
		s.wakeAfter = st.WakeTime.Sub(now)
	}
	switch {
	case idle && !wasIdle:
		wakes := "when records arrive"
		if st.WakeTime != nil {
			wakes = "at " + st.WakeTime.UTC().Format(time.RFC3339) + " (before the earliest waiting retry is due) or when records arrive"
		}
		ctrl.LoggerFrom(ctx).Info("Scaling consumers to zero: nothing due", "consumerPipeline", klog.KObj(s.p), "quietFor", quiet.String(), "wakeTime", st.WakeTime)
		r.Recorder.Eventf(s.p, nil, corev1.EventTypeNormal, eventScaledToZero, "Autoscale",
			"Nothing due for %s: consumers scaled to 0; they start again %s", quiet.Round(time.Second), wakes)
	case !idle && wasIdle:
		why := "records are due (due lag " + formatCount(dueLag) + ")"
		if woken {
			why = "a waiting retry comes due at " + st.WakeTime.Add(a.WakeLead).UTC().Format(time.RFC3339)
		}
		ctrl.LoggerFrom(ctx).Info("Waking consumers", "consumerPipeline", klog.KObj(s.p), "why", why)
		r.Recorder.Eventf(s.p, nil, corev1.EventTypeNormal, eventWoke, "Autoscale", "Consumers started again: %s", why)
	}
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
