// Package v1alpha1 contains the API of retry-operator: RetryPolicy, DeadLetterQueue, ConsumerPipeline
// and DeadLetterAction in the group retry.retryops.dev.
//
// The CRDs (config/crd/bases) and docs/api-reference.md are generated from these types (`make
// manifests generate`). Fields are documented, marked +optional or +required and bounded, as
// kube-api-linter (`make lint`) requires, with CEL for the rules between fields. Condition types and
// reasons are constants here (conditions.go). The package imports Kubernetes' type packages only,
// no client and nothing else of the repository.
//
// +kubebuilder:object:generate=true
// +groupName=retry.retryops.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "retry.retryops.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// knownTypes are the kinds of this package and their lists; each types file adds its own in init.
var knownTypes []runtime.Object

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
