// Package extmetrics serves external.metrics.k8s.io/v1beta1, read-only, in the manager's
// aggregated API server (internal/dlqapi installs it beside deadletters): one metric,
// retryops_consumerpipeline_due_lag, a ConsumerPipeline's status.dueLag, which the
// HorizontalPodAutoscaler the operator makes for a pipeline reads when KEDA is not installed.
//
// As in sigs.k8s.io/custom-metrics-apiserver (metrics-server, KEDA and prometheus-adapter use
// it), the metric's name sits where a resource's would: GET
// /apis/external.metrics.k8s.io/v1beta1/namespaces/<ns>/<metric>?labelSelector=... lists its
// values. With a single metric this is a plain list of a plain resource, so the generic API server's
// own installer serves it; Handler answers any other metric name with a NotFound that names it.
//
// Group is installed through dlqapi.Options.Groups, so internal/dlqapi knows nothing of pipelines.
// The values are read from the manager's cache of ConsumerPipelines, labelled as internal/render's
// HorizontalPodAutoscaler selects them (render.ExternalMetricLabels); the metric's name is
// internal/opmetrics' gauge of the same figure. Nothing here reads Kafka. The APIService is an
// opt-in (config/external-metrics): one server per cluster serves this group, and KEDA and
// prometheus-adapter register it too.
package extmetrics

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
)

var (
	// Scheme holds the external metrics kinds as the generic API server needs them: the external
	// version and, since the objects need no conversion, the same types as the internal version.
	Scheme = runtime.NewScheme()
	// Codecs are Scheme's serializers.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	utilruntime.Must(emv1beta1.AddToScheme(Scheme))
	Scheme.AddKnownTypes(schema.GroupVersion{Group: emv1beta1.GroupName, Version: runtime.APIVersionInternal},
		&emv1beta1.ExternalMetricValue{}, &emv1beta1.ExternalMetricValueList{})
	// The options of every request (list) in the unversioned v1.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// openAPIDefinitions describe the two kinds by their fields (k8s.io/metrics ships no generated
// definitions; the generic API server builds its type converter from these).
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	typed := func(typ, desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{typ}, Description: desc}}
	}
	value := emv1beta1.ExternalMetricValue{}.OpenAPIModelName()
	list := emv1beta1.ExternalMetricValueList{}.OpenAPIModelName()
	listMeta := metav1.ListMeta{}.OpenAPIModelName()
	timeModel := metav1.Time{}.OpenAPIModelName()
	v := typed("object", "ExternalMetricValue is a metric value for external metric: one time series of the metric, named by its labels.")
	v.Properties = map[string]spec.Schema{
		"apiVersion": typed("string", "APIVersion of the object."),
		"kind":       typed("string", "Kind of the object: ExternalMetricValue."),
		"metricName": typed("string", "The name of the metric."),
		"metricLabels": {SchemaProps: spec.SchemaProps{Type: []string{"object"}, Description: "The labels that identify the time series.",
			AdditionalProperties: &spec.SchemaOrBool{Allows: true, Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}}}},
		"timestamp": {SchemaProps: spec.SchemaProps{Description: "When the value was read.", Ref: ref(timeModel)}},
		"window":    typed("integer", "The window of a rate; absent for an instantaneous value."),
		"value":     typed("string", "The value, a quantity."),
	}
	v.Required = []string{"metricName", "metricLabels", "timestamp", "value"}
	l := typed("object", "ExternalMetricValueList is the values of a metric for a label selector.")
	l.Properties = map[string]spec.Schema{
		"apiVersion": typed("string", "APIVersion of the list."),
		"kind":       typed("string", "Kind of the list: ExternalMetricValueList."),
		"metadata":   {SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(listMeta)}},
		"items": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Description: "The values.",
			Items: &spec.SchemaOrArray{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(value)}}}}},
	}
	l.Required = []string{"items"}
	return map[string]common.OpenAPIDefinition{
		value: {Schema: v, Dependencies: []string{timeModel}},
		list:  {Schema: l, Dependencies: []string{listMeta, value}},
	}
}
