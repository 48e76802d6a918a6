package devenv

// The Pod status the runner reports, as a kubelet would.

import (
	"context"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// report writes the Pod's status as a kubelet would: Running once the process started, Ready while
// its readiness endpoint answers 200; a process that exited waits in CrashLoopBackOff for its
// restart, with its exit in lastState and restartCount counting the restarts; Failed when the
// process could not be started at all.
func (r *Runner) report(ctx context.Context, pod *corev1.Pod, p *proc) error {
	if p.unrunnable {
		return nil
	}
	r.mu.Lock()
	exitErr, exited := p.exitErr, p.exited
	r.mu.Unlock()
	if p.setup != nil {
		return r.reportWaiting(ctx, pod, p.setup)
	}
	ready := false
	if exitErr == nil && p.healthURL != "" {
		hc := http.Client{Timeout: time.Second}
		if resp, err := hc.Get(p.healthURL); err == nil {
			ready = resp.StatusCode == http.StatusOK
			_ = resp.Body.Close()
		}
	}
	phase := corev1.PodRunning
	waiting := exitErr != nil && exited != nil
	if exitErr != nil && !waiting {
		phase = corev1.PodFailed
	}
	if exitErr != nil {
		ready = false
	}
	if pod.Status.Phase == phase && isReady(pod) == ready && restartCount(pod) == p.restarts && waitingReason(pod) == waitingFor(waiting) {
		return nil
	}
	now := metav1.NewTime(r.Clock.Now())
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Status.Phase = phase
	pod.Status.PodIP, pod.Status.HostIP = "127.0.0.1", "127.0.0.1"
	if pod.Status.StartTime == nil {
		pod.Status.StartTime = &now
	}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: cond, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: cond, LastTransitionTime: now},
	}
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		st := corev1.ContainerStatus{Name: c.Name, Image: c.Image, Ready: ready, Started: ptr.To(exitErr == nil), RestartCount: p.restarts}
		if p.last != nil {
			st.LastTerminationState.Terminated = p.last
		}
		switch {
		case exitErr == nil:
			st.State.Running = &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.started)}
		case waiting:
			st.State.Waiting = &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: fmt.Sprintf("back-off %s restarting failed container", p.backoff)}
			st.LastTerminationState.Terminated = exited
		default:
			st.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: exitErr.Error()}
		}
		statuses = append(statuses, st)
	}
	pod.Status.ContainerStatuses = statuses
	return r.Client.Status().Patch(ctx, pod, patch)
}

// restartCount is the restart count the Pod's status shows.
func restartCount(pod *corev1.Pod) int32 {
	if len(pod.Status.ContainerStatuses) == 0 {
		return 0
	}
	return pod.Status.ContainerStatuses[0].RestartCount
}

// reportWaiting writes the status of a Pod whose container could not be created: Pending, not
// Ready, the container waiting with the reason and the message.
func (r *Runner) reportWaiting(ctx context.Context, pod *corev1.Pod, w *corev1.ContainerStateWaiting) error {
	if pod.Status.Phase == corev1.PodPending && len(pod.Status.ContainerStatuses) > 0 &&
		ptr.Deref(pod.Status.ContainerStatuses[0].State.Waiting, corev1.ContainerStateWaiting{}) == *w {
		return nil
	}
	now := metav1.NewTime(r.Clock.Now())
	patch := client.MergeFrom(pod.DeepCopy())
	pod.Status.Phase = corev1.PodPending
	pod.Status.HostIP = "127.0.0.1"
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "ContainersNotReady"},
		{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now, Reason: "ContainersNotReady"},
	}
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		statuses = append(statuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Waiting: w.DeepCopy()}})
	}
	pod.Status.ContainerStatuses = statuses
	return r.Client.Status().Patch(ctx, pod, patch)
}

// waitingReason is the reason the Pod's status shows its container waiting for, if any.
func waitingReason(pod *corev1.Pod) string {
	if len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].State.Waiting == nil {
		return ""
	}
	return pod.Status.ContainerStatuses[0].State.Waiting.Reason
}

// waitingFor is the waiting reason of a started container: CrashLoopBackOff between restarts.
func waitingFor(crashLooping bool) string {
	if crashLooping {
		return "CrashLoopBackOff"
	}
	return ""
}

func isReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
