package extmetrics

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	registryrest "k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/kube-openapi/pkg/common"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"

	"github.com/retryops/retry-operator/internal/render"
)

// Group is external.metrics.k8s.io as internal/dlqapi's server installs it (its dlqapi.Group).
type Group struct {
	Storage *Storage
}

// APIGroupInfo is the group with its one version and its one metric.
func (g *Group) APIGroupInfo() *genericapiserver.APIGroupInfo {
	info := genericapiserver.NewDefaultAPIGroupInfo(emv1beta1.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	info.VersionedResourcesStorageMap[emv1beta1.SchemeGroupVersion.Version] = map[string]registryrest.Storage{Metric: g.Storage}
	return &info
}

// Scheme holds the group's kinds.
func (g *Group) Scheme() *runtime.Scheme { return Scheme }

// OpenAPIDefinitions are the schemas of ExternalMetricValue and its list.
func (g *Group) OpenAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	return openAPIDefinitions(ref)
}

// Handler answers a request for any other metric of the group with NotFound, saying which one is
// served (the generic server's answer would be a bare "404 page not found"). It runs after
// authentication and authorization, as the routes do.
func (g *Group) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := genericapirequest.RequestInfoFrom(r.Context())
		if !ok || !info.IsResourceRequest || info.APIGroup != emv1beta1.GroupName || info.Resource == Metric {
			next.ServeHTTP(w, r)
			return
		}
		responsewriters.ErrorNegotiated(unknownMetric(info.Resource), Codecs, emv1beta1.SchemeGroupVersion, w, r)
	})
}

// maxNameInMessage bounds the metric name an error repeats.
const maxNameInMessage = 128

func unknownMetric(name string) *apierrors.StatusError {
	if len(name) > maxNameInMessage {
		name = name[:maxNameInMessage] + "..."
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Details: &metav1.StatusDetails{Group: emv1beta1.GroupName, Kind: name},
		Message: fmt.Sprintf("external metric %q is not served here: retry-operator serves only %s (a ConsumerPipeline's status.dueLag, labelled %s=<pipeline>)",
			name, Metric, render.ExternalMetricPipelineLabel),
	}}
}
