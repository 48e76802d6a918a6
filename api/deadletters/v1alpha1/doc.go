// Package v1alpha1 is the read-only API of dead letters, deadletters.retryops.dev/v1alpha1: one
// namespaced kind, DeadLetter, served by the operator's manager as an aggregated API (not a CRD:
// nothing is stored in etcd; every object is read from a dead letter topic and its record of
// decisions when asked for). Verbs: get and list. Being no CRD, it has deepcopy generated and no
// manifests, and kube-api-linter's maxlength and nobools rules are off for it: nothing is written
// through it.
//
// It also holds the contracts the deadletters API, the kubectl dlq plugin and its console share:
// labels.go the label keys, [Labels] and the sanitiser [LabelValue], defined nowhere else (a test,
// test/layers/labels_test.go, fails on a copy), and names.go a dead letter's object name ([Name]).
//
// +kubebuilder:object:generate=true
// +groupName=deadletters.retryops.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of dead letters, distinct from the CRDs' retry.retryops.dev.
const GroupName = "deadletters.retryops.dev"

var (
	// SchemeGroupVersion is the group and version of this package.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds DeadLetter and DeadLetterList to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// Resource is the resource of DeadLetter: deadletters.
const Resource = "deadletters"

// Kind is DeadLetter's kind; ListKind its list's.
const (
	Kind     = "DeadLetter"
	ListKind = "DeadLetterList"
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &DeadLetter{}, &DeadLetterList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}
