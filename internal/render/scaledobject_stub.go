package render

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// ScaledObject is a placeholder until the KEDA rendering lands.
func ScaledObject(p *v1.ConsumerPipeline, a *Autoscaling, prometheusAddress string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("keda.sh/v1alpha1")
	u.SetKind("ScaledObject")
	u.SetName(a.Name)
	u.SetNamespace(p.Namespace)
	return u
}
