package v1alpha1

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestLabelValue(t *testing.T) {
	for in, want := range map[string]string{
		"max_retries_exceeded":         "max_retries_exceeded",
		"HTTP 503/Service":             "HTTP_503_Service",
		"-x-":                          "x",
		"Ünïcode":                      "n_code",
		"":                             "",
		"///":                          "",
		strings.Repeat("a", 70):        strings.Repeat("a", 63),
		strings.Repeat("a", 62) + "-b": strings.Repeat("a", 62),
	} {
		got := LabelValue(in)
		if got != want {
			t.Errorf("LabelValue(%q) = %q, want %q", in, got, want)
		}
		if len(validation.IsValidLabelValue(got)) > 0 {
			t.Errorf("LabelValue(%q) = %q is not a label value", in, got)
		}
	}
}

func TestLabels(t *testing.T) {
	for _, tc := range []struct {
		name                               string
		queue, pipeline, reason, errorType string
		state                              State
		want                               map[string]string
	}{
		{"as they are", "orders-dlq", "shop/orders", "max_retries_exceeded", "HTTP5xx", StatePending, map[string]string{
			LabelQueue: "orders-dlq", LabelPipeline: "orders", LabelReason: "max_retries_exceeded", LabelErrorType: "HTTP5xx", LabelState: "Pending"}},
		{"sanitised, the pipeline's last part", "q", "a/b/c d", "x y", "", StateResolved, map[string]string{
			LabelQueue: "q", LabelPipeline: "c_d", LabelReason: "x_y", LabelErrorType: "", LabelState: "Resolved"}},
		{"no pipeline", "q", "", "r", "e", StateIgnored, map[string]string{
			LabelQueue: "q", LabelPipeline: "", LabelReason: "r", LabelErrorType: "e", LabelState: "Ignored"}},
	} {
		if got := Labels(tc.queue, tc.pipeline, tc.reason, tc.errorType, tc.state); !maps.Equal(got, tc.want) {
			t.Errorf("%s: Labels = %v, want %v", tc.name, got, tc.want)
		}
	}
}
