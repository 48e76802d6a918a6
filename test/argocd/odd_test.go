package argocd_test

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/config/argocd"
)

// TestOddObjectsNeverFailTheScript: an object the API would not normally hold (a condition without
// status or message, numbers as strings, conditions not a list, no metadata.generation) still gets a
// health status, never a script error, which Argo CD would show instead of the object's health.
func TestOddObjectsNeverFailTheScript(t *testing.T) {
	odd := map[string]map[string]any{
		"conditionsAMap":         {"status": map[string]any{"conditions": map[string]any{"type": "Ready"}}},
		"conditionsAString":      {"status": map[string]any{"conditions": "Ready"}},
		"conditionNotATable":     {"status": map[string]any{"conditions": []any{"Ready", 3}}},
		"readyNoStatusNoMessage": {"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready"}}}},
		"readyMessageANumber":    {"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "X", "message": 42}}}},
		"observedAsString":       {"status": map[string]any{"observedGeneration": "2", "conditions": []any{map[string]any{"type": "Ready", "status": "True", "observedGeneration": "2", "message": "ok"}}}},
		"idleNoMessages":         {"status": map[string]any{"autoscaling": map[string]any{"state": "Idle"}, "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}}},
		"statusAString":          {"status": "Ready"},
		"stalledNoMessage":       {"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False"}, map[string]any{"type": "Stalled", "status": "True"}}}},
		"hugeMessage":            {"status": map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "X", "message": strings.Repeat("é", 40000)}}}},
		"finalizersNotStrings":   {"metadata": map[string]any{"generation": 1, "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": []any{map[string]any{"a": 1}}}},
	}
	kinds, err := argocd.Kinds()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range kinds {
		script, err := argocd.HealthScript(kind)
		if err != nil {
			t.Fatal(err)
		}
		for name, fields := range odd {
			for _, gen := range []any{nil, 0, 2, "2"} {
				obj := map[string]any{"apiVersion": "retry.retryops.dev/v1alpha1", "kind": kind, "metadata": map[string]any{"name": "x"}}
				if gen != nil {
					obj["metadata"].(map[string]any)["generation"] = gen
				}
				for k, v := range fields {
					obj[k] = v
				}
				for _, sb := range []sandbox{builtIn, configMap} {
					t.Run(kind+"/"+name+"/"+string(sb), func(t *testing.T) {
						_, err := runHealth(script, obj, sb)
						NewWithT(t).Expect(err).NotTo(HaveOccurred())
					})
				}
			}
		}
	}
}
