package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
)

// The demo's autoscaled pipeline: bursts of records on a source of its own, a sink that takes
// burstsCost a record, and a 90s first retry, so that the live view shows it scale up on its due lag,
// back down, to zero while its retries wait, and awake again before they are due.
const (
	burstsTopic = demoNamespace + ".bursts"
	// burstsSize records every burstsEvery ask for 4 pods (500 due records each, 4 partitions).
	burstsSize  = 3000
	burstsEvery = 3 * time.Minute
	burstsCost  = 20 * time.Millisecond
)

// burstsManifest is the bursts pipeline and its policy (topic, sink address): minReplicas 0, at most
// 4 pods, one per 500 due records; 10% of records fail once and come back 90s later, long after the
// 20s of nothing due that idle the pipeline.
const burstsManifest = `# Written by make dev (hack/dev): a pipeline that scales on its due lag, to zero and back.
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: bursts}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 90s, multiplier: "2", maxDelay: 180s, jitter: {mode: None}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 10s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: bursts}
spec:
  source: {topic: %s, create: {partitions: 4, existingTopic: Adopt}}
  retryPolicyRef: {name: bursts}
  deadLetterQueueRef: {name: chatbot-dlq}
  delivery: {ordering: Unordered, maxInFlight: 2}
  sink: {uri: "http://%s/bursts"}
  autoscaling: {minReplicas: 0, maxReplicas: 4, targetDueLagPerReplica: 500, scaleDownStabilization: 20s, wakeLead: 15s}
`

// burstsSink is the bursts pipeline's sink: every record takes burstsCost, and one in ten fails once
// (503) before it is accepted.
func burstsSink() *devenv.DemoSink {
	return &devenv.DemoSink{
		Cost: burstsCost,
		Transient: func(n int) int {
			if n%10 == 0 {
				return 1
			}
			return 0
		},
	}
}

// awaitSourceTopic waits until the demo pipeline's status shows its source topic (the operator made
// or found it), polling every 2 s; it reports false when ctx ended first.
func awaitSourceTopic(ctx context.Context, stack *devenv.Stack, pipeline string) bool {
	for {
		if out, err := kubectl(stack.Kubeconfig, nil, "get", "cpl", pipeline, "-n", demoNamespace, "-o", "jsonpath={.status.topics.sourcePartitions}"); err == nil && strings.TrimSpace(out) != "" {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(2 * time.Second):
		}
	}
}

// produceBursts writes burstsSize records to burstsTopic once the bursts pipeline has its source
// topic, then again every burstsEvery, until ctx ends.
func produceBursts(ctx context.Context, stack *devenv.Stack) {
	if !awaitSourceTopic(ctx, stack, "bursts") {
		return
	}
	for n := 0; ctx.Err() == nil; n += burstsSize {
		if err := devenv.Produce(ctx, stack.KafkaOptions(), burstsTopic, n, n+burstsSize, 0); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "dev: bursts producer:", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(burstsEvery):
		}
	}
}

// autoscalingView is the live view's lines for the pipelines of namespace with spec.autoscaling.
func autoscalingView(kubeconfig, namespace string, now time.Time) string {
	out, err := kubectl(kubeconfig, nil, "get", "cpl", "-n", namespace, "-o", "json")
	if err != nil {
		return ""
	}
	list := &retryv1alpha1.ConsumerPipelineList{}
	if err := json.Unmarshal([]byte(out), list); err != nil {
		return ""
	}
	var b strings.Builder
	for i := range list.Items {
		if line := autoscalingLine(&list.Items[i], now); line != "" {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// autoscalingLine says what the autoscaling of p does: the pods it runs and wants, its due lag, and
// when idle, when it wakes. Empty for a pipeline without spec.autoscaling.
func autoscalingLine(p *retryv1alpha1.ConsumerPipeline, now time.Time) string {
	spec := p.Spec.Autoscaling
	if spec == nil {
		return ""
	}
	a := p.Status.Autoscaling
	due := "unknown"
	if p.Status.DueLag != nil {
		due = fmt.Sprint(*p.Status.DueLag)
	}
	line := fmt.Sprintf("autoscaling %s: %d pods", p.Name, p.Status.Replicas)
	if a == nil {
		return line + ", no autoscaler yet, due lag " + due
	}
	switch {
	case a.IsIdle() && a.WakeTime != nil:
		line += fmt.Sprintf(" (idle: nothing due; wakes at %s, in %s, before a waiting retry is due)",
			a.WakeTime.Format(time.TimeOnly), a.WakeTime.Sub(now).Round(time.Second))
	case a.IsIdle():
		line += " (idle: nothing due; wakes when records arrive)"
	default:
		line += fmt.Sprintf(" of %d wanted", ptr.Deref(p.Spec.Replicas, 1))
	}
	line += fmt.Sprintf(", due lag %s (%d per pod), %s %s %d..%d", due, ptr.Deref(spec.TargetDueLagPerReplica, 1000), a.Kind, a.Name, a.MinReplicas, a.MaxReplicas)
	if a.Partitions != nil {
		line += fmt.Sprintf(" (capped at %d partitions)", *a.Partitions)
	}
	if spec.MinReplicas != nil && *spec.MinReplicas == 0 {
		line += ", may scale to 0"
	}
	return line
}
