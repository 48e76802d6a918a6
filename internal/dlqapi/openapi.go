package dlqapi

import (
	extensionsopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Go type names of the kinds, as the OpenAPI builder names them.
const (
	deadLetterType     = "github.com/retryops/retry-operator/api/deadletters/v1alpha1.DeadLetter"
	deadLetterListType = "github.com/retryops/retry-operator/api/deadletters/v1alpha1.DeadLetterList"
)

// openAPIDefinitions are the schemas the generic API server needs (it builds its type converter
// from them): apimachinery's meta types (generated, taken from apiextensions-apiserver) and the two
// kinds of this API, described by their top-level fields (the API is read-only: nothing is
// validated or merged against them; `kubectl explain` shows the godoc of api/deadletters).
func openAPIDefinitions(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
	defs := extensionsopenapi.GetOpenAPIDefinitions(ref)
	str := func(desc string) spec.Schema {
		return spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}, Description: desc}}
	}
	loose := func(desc string) spec.Schema {
		return spec.Schema{
			SchemaProps:      spec.SchemaProps{Type: []string{"object"}, Description: desc},
			VendorExtensible: spec.VendorExtensible{Extensions: spec.Extensions{"x-kubernetes-preserve-unknown-fields": true}},
		}
	}
	objectMeta := metav1.ObjectMeta{}.OpenAPIModelName()
	listMeta := metav1.ListMeta{}.OpenAPIModelName()
	dl := loose("DeadLetter is one record of a DeadLetterQueue's topic, read-only, with its context headers and its state from the record of decisions.")
	dl.Properties = map[string]spec.Schema{
		"apiVersion": str("APIVersion of the object."),
		"kind":       str("Kind of the object: DeadLetter."),
		"metadata":   {SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(objectMeta)}},
	}
	defs[deadLetterType] = common.OpenAPIDefinition{Schema: dl, Dependencies: []string{objectMeta}}
	list := loose("DeadLetterList is a page of dead letters.")
	list.Properties = map[string]spec.Schema{
		"apiVersion": str("APIVersion of the list."),
		"kind":       str("Kind of the list: DeadLetterList."),
		"metadata":   {SchemaProps: spec.SchemaProps{Default: map[string]any{}, Ref: ref(listMeta)}},
		"items": {SchemaProps: spec.SchemaProps{Type: []string{"array"}, Description: "The dead letters of this page.",
			Items: &spec.SchemaOrArray{Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Ref: ref(deadLetterType)}}}}},
	}
	list.Required = []string{"items"}
	defs[deadLetterListType] = common.OpenAPIDefinition{Schema: list, Dependencies: []string{listMeta, deadLetterType}}
	return defs
}
