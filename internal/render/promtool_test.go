package render_test

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

var (
	promtoolOnce sync.Once
	promtoolPath string
	promtoolErr  error
)

// promtool finds promtool on PATH, or installs it with hack/setup-prometheus.sh. A missing promtool
// fails the test: it is never skipped.
func promtool(t *testing.T) string {
	t.Helper()
	promtoolOnce.Do(func() {
		if p, err := exec.LookPath("promtool"); err == nil {
			promtoolPath = p
			return
		}
		script, err := filepath.Abs(filepath.Join("..", "..", "hack", "setup-prometheus.sh"))
		if err != nil {
			promtoolErr = err
			return
		}
		cmd := exec.Command(script)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			promtoolErr = fmt.Errorf("%s failed: %w", script, err)
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		promtoolPath = strings.TrimSpace(lines[len(lines)-1])
	})
	if promtoolErr != nil || promtoolPath == "" {
		t.Fatalf("promtool is needed (Debian package prometheus; hack/setup-prometheus.sh installs it): %v", promtoolErr)
	}
	return promtoolPath
}

// runPromtool runs promtool in dir and returns its failure with its output.
func runPromtool(t *testing.T, dir string, args ...string) error {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("promtool %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// The promtool unit-test file format.
type promTestFile struct {
	RuleFiles          []string        `json:"rule_files"`
	EvaluationInterval string          `json:"evaluation_interval"`
	Tests              []promTestGroup `json:"tests"`
}

type promTestGroup struct {
	Name           string          `json:"name"`
	Interval       string          `json:"interval"`
	InputSeries    []promSeries    `json:"input_series"`
	AlertRuleTests []promAlertTest `json:"alert_rule_test"`
}

type promSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type promAlertTest struct {
	EvalTime  string         `json:"eval_time"`
	Alertname string         `json:"alertname"`
	ExpAlerts []promExpAlert `json:"exp_alerts"`
}

type promExpAlert struct {
	ExpLabels      map[string]string `json:"exp_labels"`
	ExpAnnotations map[string]string `json:"exp_annotations"`
}

// scenario is one situation an alert is evaluated in.
type scenario struct {
	name   string
	series []promSeries
	at     time.Duration
	fires  bool
	// value is the alert's $value when it fires (for the expected annotations).
	value float64
	// exprLabels are the labels the expression yields besides the rule's own.
	exprLabels map[string]string
}

// alertCase is how one alert is exercised: the series and evaluation interval and the scenarios.
type alertCase struct {
	interval time.Duration
	// evaluation is the rules' evaluation interval when it differs from the series' interval.
	evaluation time.Duration
	scenarios  []scenario
}

// testRules checks a rendered rule file with promtool and unit-tests every alert in it with cases,
// reporting promtool's failures on t.
func testRules(t *testing.T, f render.RuleFile, cases map[string]alertCase, wantAlerts []string) {
	t.Helper()
	for _, err := range promtoolRules(t, f, cases, wantAlerts) {
		t.Error(err)
	}
}

// promtoolRules does the work of testRules and returns promtool's failures.
func promtoolRules(t *testing.T, f render.RuleFile, cases map[string]alertCase, wantAlerts []string) []error {
	t.Helper()
	var errs []error
	dir := t.TempDir()
	data, err := f.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runPromtool(t, dir, "check", "rules", "rules.yaml"); err != nil {
		errs = append(errs, err)
	}

	var got []string
	for _, grp := range f.Groups {
		for _, r := range grp.Rules {
			got = append(got, r.Alert)
			c, ok := cases[r.Alert]
			if !ok {
				t.Errorf("alert %s has no promtool test cases", r.Alert)
				continue
			}
			ev := c.interval
			if c.evaluation != 0 {
				ev = c.evaluation
			}
			file := promTestFile{RuleFiles: []string{"rules.yaml"}, EvaluationInterval: render.PromDuration(ev)}
			for _, s := range c.scenarios {
				exp := []promExpAlert{}
				if s.fires {
					labels := maps.Clone(r.Labels)
					maps.Copy(labels, s.exprLabels)
					exp = append(exp, promExpAlert{ExpLabels: labels, ExpAnnotations: expand(t, r.Annotations, s.value)})
				}
				file.Tests = append(file.Tests, promTestGroup{
					Name:        r.Alert + ": " + s.name,
					Interval:    render.PromDuration(c.interval),
					InputSeries: s.series,
					AlertRuleTests: []promAlertTest{{
						EvalTime: render.PromDuration(s.at), Alertname: r.Alert, ExpAlerts: exp,
					}},
				})
			}
			tf, err := yaml.Marshal(file)
			if err != nil {
				t.Fatal(err)
			}
			name := "test-" + r.Alert + ".yaml"
			if err := os.WriteFile(filepath.Join(dir, name), tf, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := runPromtool(t, dir, "test", "rules", name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if strings.Join(got, ",") != strings.Join(wantAlerts, ",") {
		t.Errorf("alerts %v, want %v", got, wantAlerts)
	}
	return errs
}

func TestPipelineAlertRulesWithPromtool(t *testing.T) {
	for _, tc := range []struct {
		name   string
		inputs func(*testing.T) *render.Inputs
		want   []string
	}{
		{"sink mode, the seed defaults, a circuit breaker", sinkURIInputs,
			[]string{render.AlertConsumerLagHigh, render.AlertRetryBacklogHigh, render.AlertCircuitOpen, render.AlertDispatcherDown, render.AlertDeadLettersStuck}},
		{"sink mode, a lag threshold, no circuit breaker", sinkRefSecretsInputs,
			[]string{render.AlertConsumerLagHigh, render.AlertRetryBacklogHigh, render.AlertDispatcherDown, render.AlertDeadLettersStuck}},
		{"template mode, small thresholds, scaled to zero", func(t *testing.T) *render.Inputs {
			in := templateMinimalInputs(t)
			in.Pipeline.Spec.Replicas = ptr.To[int32](0)
			in.Pipeline.Spec.Alerts = &retryv1alpha1.PipelineAlerts{MaxConsumerLag: ptr.To[int64](50), MaxRetryBacklog: ptr.To[int64](20), For: pdur(2 * time.Minute)}
			return in
		}, []string{render.AlertConsumerLagHigh, render.AlertRetryBacklogHigh}},
		{"no retries, a long duration", func(t *testing.T) *render.Inputs {
			in := sinkURIInputs(t)
			in.Policy.Spec.MaxAttempts = 1
			in.Policy.Spec.CircuitBreaker = nil
			in.Tiers = nil
			in.Pipeline.Spec.Alerts.For = pdur(90 * time.Minute)
			return in
		}, []string{render.AlertConsumerLagHigh, render.AlertDispatcherDown, render.AlertDeadLettersStuck}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.inputs(t)
			f, err := render.AlertRules(in)
			if err != nil {
				t.Fatal(err)
			}
			testRules(t, f, pipelineAlertCases(t, in), tc.want)

			// The PrometheusRule and the ConfigMap hold the same file.
			rule, err := render.PrometheusRule(in)
			if err != nil {
				t.Fatal(err)
			}
			spec, err := yaml.Marshal(rule.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			cm, err := render.AlertConfigMap(in)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.YAML()
			if string(spec) != string(want) || len(cm.Data) != 1 || cm.Data[render.RuleFileKey(in.Pipeline.Namespace, in.Pipeline.Name, "consumerpipeline")] != string(want) {
				t.Errorf("the PrometheusRule's spec or the ConfigMap's file differs from the rule file")
			}
			if rule.GroupVersionKind() != render.PrometheusRuleGVK {
				t.Errorf("kind %v", rule.GroupVersionKind())
			}
		})
	}
}

func TestDeadLetterQueueAlertRulesWithPromtool(t *testing.T) {
	all := []string{render.AlertDeadLetterQueueSize, render.AlertDeadLetterQueueGrowth, render.AlertDeadLetterQueueOldestMessage,
		render.AlertDeadLetterQueueSizeEscalation, render.AlertDeadLetterQueueOldestMessageEscalation}
	for _, tc := range []struct {
		name string
		dlq  func(*testing.T) *retryv1alpha1.DeadLetterQueue
	}{
		{"the seed defaults", func(*testing.T) *retryv1alpha1.DeadLetterQueue { return defaultDLQ() }},
		{"custom thresholds", func(t *testing.T) *retryv1alpha1.DeadLetterQueue { return sinkRefSecretsInputs(t).DLQ }},
		{"a slow status refresh widens the growth window", func(*testing.T) *retryv1alpha1.DeadLetterQueue {
			d := defaultDLQ()
			d.Spec.StatusRefreshInterval = pdur(5 * time.Minute)
			d.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxGrowthPerMinute: ptr.To[int32](1), MaxGrowthFor: pdur(20 * time.Minute)}
			return d
		}},
		{"custom escalation thresholds", func(*testing.T) *retryv1alpha1.DeadLetterQueue {
			d := defaultDLQ()
			d.Spec.Alerts = &retryv1alpha1.DeadLetterAlerts{MaxMessages: ptr.To[int64](20), MaxMessagesFor: pdur(10 * time.Minute), EscalateMessages: ptr.To[int64](200),
				MaxOldestAge: pdur(time.Hour), EscalateOldestAge: pdur(3 * time.Hour)}
			return d
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.dlq(t)
			in := &render.DeadLetterQueueInputs{DLQ: d}
			f, err := render.DeadLetterQueueAlertRules(in)
			if err != nil {
				t.Fatal(err)
			}
			testRules(t, f, dlqAlertCases(t, d), all)
			cm, err := render.DeadLetterQueueAlertConfigMap(in)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := f.YAML()
			if cm.Data[render.RuleFileKey(d.Namespace, d.Name, "deadletterqueue")] != string(want) {
				t.Error("the ConfigMap's file differs from the rule file")
			}
		})
	}
}

// TestPromtoolTestsCanFail makes sure a wrong expectation fails promtool, so that the tests above
// really check something.
func TestPromtoolTestsCanFail(t *testing.T) {
	in := sinkURIInputs(t)
	f, err := render.AlertRules(in)
	if err != nil {
		t.Fatal(err)
	}
	cases := pipelineAlertCases(t, in)
	c := cases[render.AlertConsumerLagHigh]
	c.scenarios = []scenario{c.scenarios[1]} // at the threshold: silent
	c.scenarios[0].fires = true              // expect it to fire anyway
	c.scenarios[0].value = 1000
	f.Groups[0].Rules = f.Groups[0].Rules[:1]

	errs := promtoolRules(t, f, map[string]alertCase{render.AlertConsumerLagHigh: c}, []string{render.AlertConsumerLagHigh})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "FAILED") {
		t.Errorf("promtool accepted a test that expects an alert at the threshold: %v", errs)
	}

	// And a rule file promtool rejects fails the check.
	f.Groups[0].Rules[0].Expr = "max by (namespace) (retryops_consumerpipeline_consumer_lag"
	errs = promtoolRules(t, f, map[string]alertCase{render.AlertConsumerLagHigh: cases[render.AlertConsumerLagHigh]}, []string{render.AlertConsumerLagHigh})
	if len(errs) == 0 {
		t.Error("promtool accepted an invalid expression")
	}
}
