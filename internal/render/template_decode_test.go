package render_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// spec.template is stored schemaless (x-kubernetes-preserve-unknown-fields): the API server keeps a
// misspelt field, and a plain decode into the typed pod template drops it without a word, so a typo
// such as `contaienrs` or `imagee` left the pods without what the user meant. DecodeTemplate decodes
// the stored template strictly and names the field.
func TestDecodeTemplateRefusesUnknownAndDuplicateFields(t *testing.T) {
	for _, tc := range []struct {
		name, raw string
		field     string // the SpecError's Field
		message   string // what the SpecError's Message starts with
	}{
		{"misspelt pod field", `{"spec":{"contaienrs":[{"name":"c","image":"i"}],"containers":[{"name":"c","image":"i"}]}}`,
			"spec.template.spec.contaienrs", "unknown field"},
		{"misspelt container field", `{"spec":{"containers":[{"name":"c","image":"i"},{"name":"d","imagee":"i"}]}}`,
			"spec.template.spec.containers[1].imagee", "unknown field"},
		{"wrong case", `{"spec":{"Containers":[{"name":"c","image":"i"}]}}`,
			"spec.template.spec.Containers", "unknown field"},
		{"deep", `{"spec":{"containers":[{"name":"c","image":"i","securityContext":{"runAsNonroot":true}}]}}`,
			"spec.template.spec.containers[0].securityContext.runAsNonroot", "unknown field"},
		{"metadata", `{"metadata":{"labels":{"a":"b"},"name":"x"},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
			"spec.template.metadata.name", "unknown field"},
		{"top level", `{"spce":{},"spec":{"containers":[{"name":"c","image":"i"}]}}`,
			"spec.template.spce", "unknown field"},
		{"duplicate", `{"spec":{"containers":[{"name":"c","image":"i","image":"j"}]}}`,
			"spec.template.spec.containers[0].image", "duplicate field"},
		{"wrong type", `{"spec":{"containers":"c"}}`,
			"spec.template", "cannot be decoded as a pod template"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// What a typed client does: the field is gone, no error.
			var loose retryv1alpha1.PodTemplate
			if err := json.Unmarshal([]byte(tc.raw), &loose); err != nil && tc.message != "cannot be decoded as a pod template" {
				t.Fatalf("a plain decode refuses it too: %v", err)
			}
			_, err := render.DecodeTemplate([]byte(tc.raw))
			var se *render.SpecError
			if !errors.As(err, &se) {
				t.Fatalf("DecodeTemplate(%s) = %v, want a *render.SpecError", tc.raw, err)
			}
			if se.Field != tc.field || !strings.HasPrefix(se.Message, tc.message) {
				t.Errorf("DecodeTemplate(%s) = %q, want %s: %s...", tc.raw, se.Error(), tc.field, tc.message)
			}
		})
	}
}

func TestDecodeTemplateNamesEveryUnknownField(t *testing.T) {
	_, err := render.DecodeTemplate([]byte(`{"spec":{"contaienrs":[],"hostNetwrok":true,"containers":[{"name":"c","image":"i"}]}}`))
	if err == nil {
		t.Fatal("accepted")
	}
	if got, want := err.Error(), "spec.template.spec.contaienrs: unknown field"; !strings.HasPrefix(got, want) {
		t.Errorf("error %q, want it to start %q", got, want)
	}
	if !strings.Contains(err.Error(), "spec.template.spec.hostNetwrok") {
		t.Errorf("error %q does not name the second unknown field", err)
	}
}

// A template without a mistake decodes to what a plain decode gives, and renders the Deployment the
// typed template renders.
func TestDecodeTemplateKeepsAValidTemplate(t *testing.T) {
	in := templateUserSettingsInputs(t)
	raw, err := json.Marshal(in.Pipeline.Spec.Template)
	if err != nil {
		t.Fatal(err)
	}
	got, err := render.DecodeTemplate(raw)
	if err != nil {
		t.Fatalf("DecodeTemplate(%s): %v", raw, err)
	}
	var want retryv1alpha1.PodTemplate
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, &want) {
		t.Fatalf("DecodeTemplate = %+v, want %+v", got, want)
	}
	typed, err := render.Deployment(in, "hash")
	if err != nil {
		t.Fatal(err)
	}
	in.Pipeline.Spec.Template = got
	decoded, err := render.Deployment(in, "hash")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(typed, decoded) {
		t.Error("the decoded template renders another Deployment than the typed one")
	}
}
