package render

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Defaults of spec.autoscaling (objects built in Go skip API defaulting).
const (
	DefaultAutoscalingMinReplicas      = 1
	DefaultTargetDueLagPerReplica      = 1000
	DefaultScaleDownStabilization      = 5 * time.Minute
	DefaultWakeLead                    = 30 * time.Second
	maxScaleDownStabilizationSeconds   = 3600
	autoscalerComponent                = "autoscaler"
	pipelineKind                       = "ConsumerPipeline"
	externalMetricPipelineLabel        = "consumerpipeline"
	externalMetricDueLag               = "retryops_consumerpipeline_due_lag"
	autoscalingMessagePartitionsFormat = "maxReplicas %d lowered to %d, the partition count of the pipeline's largest topic: more pods would have nothing to read"
)

// ExternalMetricDueLag is the external metric (external.metrics.k8s.io) and Prometheus gauge the
// autoscalers read: a pipeline's status.dueLag.
const ExternalMetricDueLag = externalMetricDueLag

// ExternalMetricPipelineLabel is the label naming the pipeline in the external metric's values
// (the Prometheus gauge's label of the same name).
const ExternalMetricPipelineLabel = externalMetricPipelineLabel

// ExternalMetricNameHashLabel is the label a value of the external metric carries when its
// pipeline's name is too long for a label value: the SHA-256 of the whole name, in 32 hex digits.
const ExternalMetricNameHashLabel = externalMetricPipelineLabel + "-sha256"

// ExternalMetricLabels are the labels of a pipeline's value of the external metric: its name, made
// a valid label value (names longer than 63 characters are shortened with a hash, as the
// pipeline label of its children is), and for a name so shortened ExternalMetricNameHashLabel.
// A shortened name is itself a valid name that another pipeline of the namespace may have:
// ExternalMetricSelector tells them apart.
func ExternalMetricLabels(pipeline string) map[string]string {
	l := map[string]string{externalMetricPipelineLabel: labelValue(pipeline)}
	if l[externalMetricPipelineLabel] != pipeline {
		sum := sha256.Sum256([]byte(pipeline))
		l[ExternalMetricNameHashLabel] = hex.EncodeToString(sum[:16])
	}
	return l
}

// ExternalMetricSelector selects the value of the external metric of one pipeline: its labels, and
// for a name that was not shortened the absence of ExternalMetricNameHashLabel, so that neither of
// two pipelines, one named like the other's shortened label, reads the other's due lag.
func ExternalMetricSelector(pipeline string) *metav1.LabelSelector {
	sel := &metav1.LabelSelector{MatchLabels: ExternalMetricLabels(pipeline)}
	if _, shortened := sel.MatchLabels[ExternalMetricNameHashLabel]; !shortened {
		sel.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: ExternalMetricNameHashLabel, Operator: metav1.LabelSelectorOpDoesNotExist}}
	}
	return sel
}

// Autoscaling is what the autoscaler of a pipeline is given: spec.autoscaling with its defaults,
// the bounds made effective (maxReplicas at most the partition count, minReplicas at least 1:
// scaling to zero is the operator's).
type Autoscaling struct {
	// Name is the autoscaler's name: the Deployment's, hashed down to 63 characters (AutoscalerName).
	Name string
	// Min and Max are the autoscaler's bounds; Min >= 1, Max >= Min.
	Min, Max int32
	// ScaleToZero is spec.autoscaling.minReplicas == 0.
	ScaleToZero bool
	// Capped is set when Max was lowered to the partition count; Partitions is that count.
	Capped     bool
	Partitions int32
	// Target is the due lag per replica.
	Target int64
	// ScaleDownStabilization is how long before scaling down (and, with ScaleToZero, to zero).
	ScaleDownStabilization time.Duration
	// WakeLead is how long before the earliest due time a pipeline at zero starts again.
	WakeLead time.Duration
}

// AutoscalingOf returns the autoscaling of p, whose largest topic has partitions partitions (0 when
// unknown: no cap); nil when spec.autoscaling is unset.
func AutoscalingOf(p *retryv1alpha1.ConsumerPipeline, partitions int32) *Autoscaling {
	s := p.Spec.Autoscaling
	if s == nil {
		return nil
	}
	a := &Autoscaling{
		Name: AutoscalerName(p), Min: DefaultAutoscalingMinReplicas, Max: max(s.MaxReplicas, 1),
		Target: DefaultTargetDueLagPerReplica, ScaleDownStabilization: DefaultScaleDownStabilization, WakeLead: DefaultWakeLead,
		Partitions: partitions,
	}
	if s.MinReplicas != nil {
		a.Min = *s.MinReplicas
	}
	if a.Min <= 0 {
		a.ScaleToZero, a.Min = true, 1
	}
	if s.TargetDueLagPerReplica != nil && *s.TargetDueLagPerReplica > 0 {
		a.Target = *s.TargetDueLagPerReplica
	}
	if s.ScaleDownStabilization != nil {
		a.ScaleDownStabilization = min(max(s.ScaleDownStabilization.Duration, 0), maxScaleDownStabilizationSeconds*time.Second)
	}
	if s.WakeLead != nil && s.WakeLead.Duration > 0 {
		a.WakeLead = s.WakeLead.Duration
	}
	if partitions > 0 && a.Max > partitions {
		a.Max, a.Capped = partitions, true
	}
	a.Min = min(a.Min, a.Max)
	return a
}

// CapMessage says why Max is below spec.autoscaling.maxReplicas; empty when it is not.
func (a *Autoscaling) CapMessage(p *retryv1alpha1.ConsumerPipeline) string {
	if !a.Capped || p.Spec.Autoscaling == nil {
		return ""
	}
	return fmt.Sprintf(autoscalingMessagePartitionsFormat, p.Spec.Autoscaling.MaxReplicas, a.Partitions)
}

// stabilizationSeconds is ScaleDownStabilization in whole seconds.
func (a *Autoscaling) stabilizationSeconds() int32 {
	return int32(a.ScaleDownStabilization / time.Second) //nolint:gosec // at most 3600
}

// AutoscalerLabels are the labels of a pipeline's autoscaler.
func AutoscalerLabels(p *retryv1alpha1.ConsumerPipeline) map[string]string {
	return pipelineLabels(p, autoscalerComponent)
}

// HorizontalPodAutoscaler renders the autoscaling/v2 HorizontalPodAutoscaler of p: it scales the
// pipeline (its scale subresource, never the Deployment) on the external metric
// retryops_consumerpipeline_due_lag of that pipeline, which the operator serves, so that each
// replica has at most Target records due.
func HorizontalPodAutoscaler(p *retryv1alpha1.ConsumerPipeline, a *Autoscaling) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		TypeMeta:   metav1.TypeMeta{APIVersion: autoscalingv2.SchemeGroupVersion.String(), Kind: "HorizontalPodAutoscaler"},
		ObjectMeta: metav1.ObjectMeta{Name: a.Name, Namespace: p.Namespace, Labels: AutoscalerLabels(p)},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: retryv1alpha1.GroupVersion.String(), Kind: pipelineKind, Name: p.Name},
			MinReplicas:    ptr.To(a.Min),
			MaxReplicas:    a.Max,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ExternalMetricSourceType,
				External: &autoscalingv2.ExternalMetricSource{
					Metric: autoscalingv2.MetricIdentifier{
						Name:     externalMetricDueLag,
						Selector: ExternalMetricSelector(p.Name),
					},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: resource.NewQuantity(a.Target, resource.DecimalSI)},
				},
			}},
			Behavior: &autoscalingv2.HorizontalPodAutoscalerBehavior{
				ScaleDown: &autoscalingv2.HPAScalingRules{StabilizationWindowSeconds: ptr.To(a.stabilizationSeconds())},
			},
		},
	}
}
