package dlqapi

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
)

var (
	// Scheme holds the deadletters kinds, as the generic API server needs them: the external version
	// and, since the objects need no conversion, the same types as the internal version.
	Scheme = runtime.NewScheme()
	// Codecs are Scheme's serializers.
	Codecs = serializer.NewCodecFactory(Scheme)
)

func init() {
	utilruntime.Must(dlv1.AddToScheme(Scheme))
	Scheme.AddKnownTypes(schema.GroupVersion{Group: dlv1.GroupName, Version: runtime.APIVersionInternal}, &dlv1.DeadLetter{}, &dlv1.DeadLetterList{})
	utilruntime.Must(Scheme.AddFieldLabelConversionFunc(dlv1.SchemeGroupVersion.WithKind(dlv1.Kind), fieldLabel))
	// The options of every request (list, get) in the unversioned v1.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
}

// fieldLabel accepts the field selectors of a list: metadata.name, metadata.namespace, since,
// until, and the exact fields queue, reason, errorType and pipeline.
func fieldLabel(label, value string) (string, string, error) {
	switch label {
	case "metadata.name", "metadata.namespace", dlv1.FieldSince, dlv1.FieldUntil,
		dlv1.FieldQueue, dlv1.FieldReason, dlv1.FieldErrorType, dlv1.FieldPipeline:
		return label, value, nil
	}
	return "", "", fieldLabelError(label)
}

func fieldLabelError(label string) error {
	if len(label) > 64 {
		label = label[:64] + "..."
	}
	return fmt.Errorf("field label %q not supported for deadletters: use metadata.name, %s, %s, %s, %s, %s or %s", label,
		dlv1.FieldQueue, dlv1.FieldReason, dlv1.FieldErrorType, dlv1.FieldPipeline, dlv1.FieldSince, dlv1.FieldUntil)
}
