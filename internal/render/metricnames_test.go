package render_test

import (
	"slices"
	"testing"

	"k8s.io/utils/ptr"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/promcheck"
	"github.com/retryops/retry-operator/internal/render"
)

func renderedRuleFiles(t *testing.T) map[string]render.RuleFile {
	t.Helper()
	files := map[string]render.RuleFile{}
	for _, tc := range allCases {
		f, err := render.AlertRules(tc.inputs(t))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		files["pipeline: "+tc.name] = f
	}
	zero := sinkURIInputs(t)
	zero.Pipeline.Spec.Autoscaling = &retryv1alpha1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 4}
	f, err := render.AlertRules(zero)
	if err != nil {
		t.Fatal(err)
	}
	files["pipeline: may scale to zero"] = f
	for name, d := range map[string]*retryv1alpha1.DeadLetterQueue{"defaults": defaultDLQ(), "custom": sinkRefSecretsInputs(t).DLQ} {
		f, err := render.DeadLetterQueueAlertRules(&render.DeadLetterQueueInputs{DLQ: d})
		if err != nil {
			t.Fatal(err)
		}
		files["dlq: "+name] = f
	}
	return files
}

// TestEveryMetricOfTheRulesIsExported checks that every metric an alert expression selects is
// exported by the dispatcher (sdk/metrics) or the operator (internal/opmetrics), and
// that every label it matches on is one that metric has.
func TestEveryMetricOfTheRulesIsExported(t *testing.T) {
	alerts := map[string]bool{}
	for file, f := range renderedRuleFiles(t) {
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				alerts[r.Alert] = true
				for _, p := range promcheck.Problems(r.Expr) {
					t.Errorf("%s: %s %s: %s", file, r.Alert, p, r.Expr)
				}
				sels := promcheck.Selectors(r.Expr)
				if len(sels) == 0 {
					t.Errorf("%s: %s has an unscoped selector: %s", file, r.Alert, r.Expr)
				}
				for _, sel := range sels {
					if !slices.Contains(sel.Labels, "namespace") || len(sel.Labels) < 2 {
						t.Errorf("%s: %s: selector %s is not scoped to one resource (namespace and name)", file, r.Alert, sel.Text)
					}
				}
			}
		}
	}
	for _, a := range []string{render.AlertConsumerLagHigh, render.AlertRetryBacklogHigh, render.AlertCircuitOpen, render.AlertDispatcherDown, render.AlertDeadLettersStuck,
		render.AlertDeadLetterQueueSize, render.AlertDeadLetterQueueGrowth, render.AlertDeadLetterQueueOldestMessage} {
		if !alerts[a] {
			t.Errorf("no rendered rule file holds %s, so its metrics went unchecked", a)
		}
	}
}

func TestTheMetricCheckRejectsAnUnexportedMetric(t *testing.T) {
	for _, expr := range []string{
		`max by (namespace) (retryops_dlq_size{namespace="a"}) > 1`,
		`up{namespace="a", job="retryops"} == 0`,
		`rate(retryops_dispatcher_records{namespace="a"}[5m]) > 0`,
	} {
		if len(promcheck.Problems(expr)) == 0 {
			t.Errorf("%s passed the check", expr)
		}
	}
}
