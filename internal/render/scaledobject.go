package render

import (
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
)

// ScaledObjectGVK is the kind ScaledObject renders. The controller makes one when KEDA's CRD
// scaledobjects.keda.sh is served, else a HorizontalPodAutoscaler.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

const (
	// ScaledObjectTriggerName names the ScaledObject's one trigger (KEDA's metric names derive from it).
	ScaledObjectTriggerName = "due-lag"
	// scaledObjectPollingSeconds is how often KEDA evaluates the trigger for activation; the HPA KEDA
	// makes reads the metric on its own period.
	scaledObjectPollingSeconds = 10
	// maxAutoscalerNameLength: KEDA's admission webhook refuses a ScaledObject, or the HPA it makes,
	// whose name would not fit in a label value.
	maxAutoscalerNameLength = 63
	dispatcherSuffix        = "-dispatcher"
)

// AutoscalerName is the name of a pipeline's autoscaler: the Deployment's, shortened with a hash
// when it would not fit in a label value (so that KEDA accepts it on either path).
func AutoscalerName(p *retryv1alpha1.ConsumerPipeline) string {
	return shorten(p.Name, maxAutoscalerNameLength-len(dispatcherSuffix)) + dispatcherSuffix
}

// DueLagQuery is the PromQL query of the ScaledObject's trigger: the due lag of the pipeline
// namespace/name, the largest value if several operator replicas export it.
func DueLagQuery(namespace, name string) string {
	return "max(" + selector(opmetrics.ConsumerPipelineDueLag, opmetrics.LabelNamespace, namespace, opmetrics.LabelConsumerPipeline, name) + ")"
}

// ScaledObject renders the KEDA ScaledObject of p: it scales the pipeline (its scale subresource,
// never the Deployment) on the due lag Prometheus scrapes from the operator, which is there
// whatever the pipeline's replicas, so that each replica has at most Target records due. Its
// bounds are a's (never below 1: scaling to zero is the operator's, not KEDA's). prometheusAddress
// is the Prometheus server KEDA queries (--keda-prometheus-address).
func ScaledObject(p *retryv1alpha1.ConsumerPipeline, a *Autoscaling, prometheusAddress string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{
				"apiVersion": retryv1alpha1.GroupVersion.String(),
				"kind":       pipelineKind,
				"name":       p.Name,
			},
			"minReplicaCount": int64(a.Min),
			"maxReplicaCount": int64(a.Max),
			"pollingInterval": int64(scaledObjectPollingSeconds),
			"cooldownPeriod":  int64(a.stabilizationSeconds()),
			"advanced": map[string]any{
				"horizontalPodAutoscalerConfig": map[string]any{
					"name": a.Name,
					"behavior": map[string]any{
						"scaleDown": map[string]any{"stabilizationWindowSeconds": int64(a.stabilizationSeconds())},
					},
				},
			},
			"triggers": []any{map[string]any{
				"type":       "prometheus",
				"name":       ScaledObjectTriggerName,
				"metricType": "AverageValue",
				"metadata": map[string]any{
					"serverAddress": prometheusAddress,
					"query":         DueLagQuery(p.Namespace, p.Name),
					"threshold":     strconv.FormatInt(a.Target, 10),
					// No series means the operator does not know the due lag (Kafka unreachable, no
					// source topic): KEDA then reports an error and the HPA keeps the replicas, where
					// the default (null as 0) would scale the pipeline down.
					"ignoreNullValues": "false",
				},
			}},
		},
	}}
	u.SetGroupVersionKind(ScaledObjectGVK)
	u.SetName(a.Name)
	u.SetNamespace(p.Namespace)
	u.SetLabels(AutoscalerLabels(p))
	return u
}
