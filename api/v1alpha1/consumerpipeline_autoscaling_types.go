package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// PipelineAutoscaling is how the operator scales a pipeline on its due lag.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas"
type PipelineAutoscaling struct {
	// minReplicas is the fewest consumer pods. 0 lets the pipeline scale to zero: with nothing due
	// for scaleDownStabilization it runs no pod, and it starts one again as soon as a refresh finds
	// source records, or wakeLead before the earliest due time of a record waiting in a retry tier
	// (status.autoscaling.wakeTime). Defaults to 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// maxReplicas is the most consumer pods. Pods beyond the partition count of the pipeline's
	// largest topic would have nothing to read: the autoscaler gets the lower of the two, and
	// status.autoscaling says so.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +required
	MaxReplicas int32 `json:"maxReplicas"`

	// targetDueLagPerReplica is the due lag one consumer pod is expected to work off: the autoscaler
	// runs ceil(dueLag / targetDueLagPerReplica) pods, within the bounds. Defaults to 1000.
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	TargetDueLagPerReplica *int64 `json:"targetDueLagPerReplica,omitempty"`

	// scaleDownStabilization is how long the due lag must have called for fewer pods before the
	// autoscaler removes any (the largest recommendation over that window wins), and how long
	// nothing must have been due before a pipeline with minReplicas 0 goes to zero. Scaling up is
	// immediate. Defaults to 5m; at most 1h.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="autoscaling.scaleDownStabilization must be between 0s and 1h"
	// +optional
	ScaleDownStabilization *metav1.Duration `json:"scaleDownStabilization,omitempty"`

	// wakeLead is how long before the earliest due time of a waiting retry the consumer of a
	// pipeline at zero pods is started again, so that no retry is late because its consumer slept:
	// enough for a pod to be scheduled, pull its image and join the group. Defaults to 30s; between
	// 1s and 10m.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('10m')",message="autoscaling.wakeLead must be between 1s and 10m"
	// +optional
	WakeLead *metav1.Duration `json:"wakeLead,omitempty"`
}

// AutoscalerKind is the kind of autoscaler the operator made for a pipeline.
// +kubebuilder:validation:Enum=HorizontalPodAutoscaler;ScaledObject
type AutoscalerKind string

const (
	// AutoscalerHPA is an autoscaling/v2 HorizontalPodAutoscaler on the operator's external metric.
	AutoscalerHPA AutoscalerKind = "HorizontalPodAutoscaler"
	// AutoscalerKEDA is a KEDA ScaledObject (keda.sh/v1alpha1).
	AutoscalerKEDA AutoscalerKind = "ScaledObject"
)

// AutoscalingState says whether a pipeline that may scale to zero runs its consumers.
// +kubebuilder:validation:Enum=Active;Idle
type AutoscalingState string

const (
	// AutoscalingActive: the consumers run, as many as the autoscaler asks.
	AutoscalingActive AutoscalingState = "Active"
	// AutoscalingIdle: nothing is due, the consumer Deployment runs no pod until wakeTime or until
	// records arrive.
	AutoscalingIdle AutoscalingState = "Idle"
)

// IsIdle reports whether the pipeline runs no pod because nothing is due.
func (s *PipelineAutoscalingStatus) IsIdle() bool { return s != nil && s.State == AutoscalingIdle }

// PipelineAutoscalingStatus is what the operator's autoscaling of a pipeline does.
type PipelineAutoscalingStatus struct {
	// kind is the kind of the autoscaler the operator made.
	// +optional
	Kind AutoscalerKind `json:"kind,omitempty"`

	// name is the autoscaler's name, in the pipeline's namespace.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`

	// minReplicas is the fewest pods the autoscaler was given: at least 1 (scaling to zero is the
	// operator's: see state).
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`
	// maxReplicas is the most pods the autoscaler was given: at most the partition count.
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// partitions is the partition count of the pipeline's largest topic, the most pods that can
	// all have work. Set when it lowered spec.autoscaling.maxReplicas.
	// +optional
	Partitions *int32 `json:"partitions,omitempty"`

	// state is Idle while a pipeline with minReplicas 0 runs no pod because nothing is due, else
	// Active.
	// +optional
	State AutoscalingState `json:"state,omitempty"`

	// lastActiveTime is the last refresh that found work due (or, for a pipeline that never
	// had any, when autoscaling started).
	// +optional
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty"`

	// lastScaleTime is when the operator last changed the consumer Deployment's replicas (the
	// autoscaler's decision, a scale to zero, a wake). For a few minutes after it, pods not yet
	// ready are a scale in progress, not a problem: DeploymentReady stays True, reason Scaling.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`

	// wakeTime is, while idle, when the consumer starts again at the latest: wakeLead before the
	// earliest time a record waiting in a retry tier can come due. Unset when no record waits (then
	// the next source record wakes it, within a refresh interval).
	// +optional
	WakeTime *metav1.Time `json:"wakeTime,omitempty"`

	// message says, in words, what the autoscaler does (the bounds, the cap, why idle).
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
}
