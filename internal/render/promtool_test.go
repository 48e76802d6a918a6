package render_test

import (
	"fmt"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	dmetrics "github.com/retryops/retry-operator/internal/dispatcher/metrics"
	"github.com/retryops/retry-operator/internal/opmetrics"
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
	interval  time.Duration
	scenarios []scenario
}

func series(metric string, labels map[string]string, values string) promSeries {
	var b strings.Builder
	b.WriteString(metric + "{")
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + strconv.Quote(labels[k]))
	}
	b.WriteString("}")
	return promSeries{Series: b.String(), Values: values}
}

func g(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// constant is n samples of v; ramp is n samples from start rising by step.
func constant(v float64, n int) string { return g(v) + "x" + strconv.Itoa(n-1) }

func ramp(start, step float64, n int) string {
	return g(start) + "+" + g(step) + "x" + strconv.Itoa(n-1)
}

// samples is how many samples, interval apart, cover [0, at] with a margin.
func samples(at, interval time.Duration) int { return int(at/interval) + 2 }

// interval is a quarter of the alert's duration, between 15s and 1m.
func interval(f time.Duration) time.Duration {
	return min(max(f/4, 15*time.Second), time.Minute)
}

func with(base map[string]string, kv ...string) map[string]string {
	out := maps.Clone(base)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// thresholdCase is a gauge alert "max by (...) (metric{scope}) > t for f".
func thresholdCase(metric string, scope map[string]string, nameLabel string, t float64, f time.Duration) alertCase {
	iv := interval(f)
	at := f + 2*iv
	n := samples(at, iv)
	return alertCase{interval: iv, scenarios: []scenario{
		{name: "fires above the threshold after its duration", at: at, fires: true, value: t + 1,
			series: []promSeries{series(metric, scope, constant(t+1, n))}},
		{name: "silent at the threshold", at: at,
			series: []promSeries{series(metric, scope, constant(t, n))}},
		{name: "silent above the threshold for less than its duration", at: f - iv,
			series: []promSeries{series(metric, scope, constant(t+1, n))}},
		{name: "silent when only other resources are above", at: at, series: []promSeries{
			series(metric, scope, constant(0, n)),
			series(metric, with(scope, nameLabel, "other"), constant(t+1000, n)),
			series(metric, with(scope, "namespace", "other-namespace"), constant(t+1000, n)),
		}},
	}}
}

func pipelineAlertCases(t *testing.T, in *render.Inputs) map[string]alertCase {
	t.Helper()
	ns, name := in.Pipeline.Namespace, in.Pipeline.Name
	th := render.PipelineAlertThresholds(in.Pipeline)
	op := map[string]string{opmetrics.LabelNamespace: ns, opmetrics.LabelConsumerPipeline: name}
	dp := map[string]string{"namespace": ns, dmetrics.LabelPipeline: name, "pod": name + "-dispatcher-1"}
	circuit := func() alertCase {
		f := render.CircuitOpenFor
		iv := interval(f)
		at := f + 2*iv
		n := samples(at, iv)
		exprLabels := map[string]string{dmetrics.LabelPipeline: name}
		return alertCase{interval: iv, scenarios: []scenario{
			{name: "fires when open for its duration", at: at, fires: true, value: 2, exprLabels: exprLabels,
				series: []promSeries{series(dmetrics.CircuitState, dp, constant(dmetrics.CircuitOpen, n))}},
			{name: "fires when cycling between open and half-open", at: at, fires: true, value: 2, exprLabels: exprLabels,
				series: []promSeries{series(dmetrics.CircuitState, dp, strings.Repeat("2 1 ", n/2+1))}},
			{name: "silent when closed", at: at,
				series: []promSeries{series(dmetrics.CircuitState, dp, constant(dmetrics.CircuitClosed, n))}},
			{name: "silent when open for less than its duration", at: f - iv,
				series: []promSeries{series(dmetrics.CircuitState, dp, constant(dmetrics.CircuitOpen, n))}},
			{name: "silent when only other pipelines are open", at: at, series: []promSeries{
				series(dmetrics.CircuitState, dp, constant(0, n)),
				series(dmetrics.CircuitState, with(dp, dmetrics.LabelPipeline, "other"), constant(2, n)),
				series(dmetrics.CircuitState, with(dp, "namespace", "other-namespace"), constant(2, n)),
			}},
		}}
	}
	down := func() alertCase {
		f := render.DispatcherDownFor
		iv := interval(f)
		at := f + 2*iv
		n := samples(at, iv)
		other := []promSeries{
			series(dmetrics.Ready, with(dp, dmetrics.LabelPipeline, "other"), constant(1, n)),
			series(dmetrics.Ready, with(dp, "namespace", "other-namespace"), constant(1, n)),
		}
		return alertCase{interval: iv, scenarios: []scenario{
			{name: "fires when no consumer is scraped at all, even if other pipelines are up", at: at, fires: true, series: other},
			{name: "fires when no consumer is ready for its duration", at: at, fires: true, series: []promSeries{
				series(dmetrics.Ready, dp, constant(0, n)),
				series(dmetrics.Ready, with(dp, "pod", name+"-dispatcher-2"), constant(0, n)),
			}},
			{name: "silent when one consumer is ready", at: at, series: []promSeries{
				series(dmetrics.Ready, dp, constant(1, n)),
				series(dmetrics.Ready, with(dp, "pod", name+"-dispatcher-2"), constant(0, n)),
			}},
			{name: "silent when down for less than its duration", at: f - iv,
				series: []promSeries{series(dmetrics.Ready, dp, constant(0, n))}},
		}}
	}
	stuck := func() alertCase {
		f := render.DeadLettersStuckFor
		iv := interval(f)
		at := f + 2*iv
		n := samples(at, iv)
		return alertCase{interval: iv, scenarios: []scenario{
			{name: "fires when a dead letter stays stuck for its duration", at: at, fires: true, value: 1,
				series: []promSeries{series(dmetrics.StuckDeadLetters, dp, constant(1, n))}},
			{name: "silent when nothing is stuck", at: at,
				series: []promSeries{series(dmetrics.StuckDeadLetters, dp, constant(0, n))}},
			{name: "silent when stuck for less than its duration", at: f - iv,
				series: []promSeries{series(dmetrics.StuckDeadLetters, dp, constant(1, n))}},
			{name: "silent when only other pipelines are stuck", at: at, series: []promSeries{
				series(dmetrics.StuckDeadLetters, with(dp, dmetrics.LabelPipeline, "other"), constant(1, n)),
				series(dmetrics.StuckDeadLetters, with(dp, "namespace", "other-namespace"), constant(1, n)),
			}},
		}}
	}
	return map[string]alertCase{
		render.AlertConsumerLagHigh:  thresholdCase(opmetrics.ConsumerPipelineConsumerLag, op, opmetrics.LabelConsumerPipeline, float64(th.MaxConsumerLag), th.For),
		render.AlertRetryBacklogHigh: thresholdCase(opmetrics.ConsumerPipelineRetryBacklog, op, opmetrics.LabelConsumerPipeline, float64(th.MaxRetryBacklog), th.For),
		render.AlertCircuitOpen:      circuit(),
		render.AlertDispatcherDown:   down(),
		render.AlertDeadLettersStuck: stuck(),
	}
}

func dlqAlertCases(t *testing.T, d *v1.DeadLetterQueue) map[string]alertCase {
	t.Helper()
	th := render.DeadLetterQueueAlertThresholds(d)
	scope := map[string]string{opmetrics.LabelNamespace: d.Namespace, opmetrics.LabelDeadLetterQueue: d.Name}
	growth := func() alertCase {
		f := th.MaxGrowthFor
		iv := interval(f)
		at := f + 3*iv
		n := samples(at, iv)
		perSample := func(perMinute float64) float64 { return perMinute * iv.Minutes() }
		limit := float64(th.MaxGrowthPerMinute)
		m := opmetrics.DeadLetterQueueMessages
		return alertCase{interval: iv, scenarios: []scenario{
			{name: "fires when growing faster than the limit for its duration", at: at, fires: true, value: limit + 1,
				series: []promSeries{series(m, scope, ramp(0, perSample(limit+1), n))}},
			{name: "silent when growing slower than the limit", at: at,
				series: []promSeries{series(m, scope, ramp(0, perSample(limit-1), n))}},
			{name: "silent when a large queue does not grow", at: at,
				series: []promSeries{series(m, scope, constant(100000, n))}},
			{name: "silent when growing fast for less than its duration", at: f - iv,
				series: []promSeries{series(m, scope, ramp(0, perSample(limit+1), n))}},
			{name: "silent when only other queues grow", at: at, series: []promSeries{
				series(m, scope, constant(5, n)),
				series(m, with(scope, opmetrics.LabelDeadLetterQueue, "other"), ramp(0, perSample(limit*10), n)),
				series(m, with(scope, "namespace", "other-namespace"), ramp(0, perSample(limit*10), n)),
			}},
		}}
	}
	oldest := func() alertCase {
		f := render.OldestMessageFor
		iv := interval(f)
		const ts = 60 // the oldest dead letter's timestamp: one minute after the test's epoch
		crossing := th.MaxOldestAge + ts*time.Second
		at := crossing + f + 2*iv
		n := samples(at, iv)
		m := opmetrics.DeadLetterQueueOldestMessageTimestamp
		return alertCase{interval: iv, scenarios: []scenario{
			{name: "fires when older than the limit for its duration", at: at, fires: true, value: (at - ts*time.Second).Seconds(),
				series: []promSeries{series(m, scope, constant(ts, n))}},
			{name: "silent at exactly the limit", at: crossing,
				series: []promSeries{series(m, scope, constant(ts, n))}},
			{name: "silent when older than the limit for less than its duration", at: crossing + f - iv,
				series: []promSeries{series(m, scope, constant(ts, n))}},
			{name: "silent on a zero timestamp", at: at,
				series: []promSeries{series(m, scope, constant(0, n))}},
			{name: "silent when only other queues are old", at: at, series: []promSeries{
				series(m, with(scope, opmetrics.LabelDeadLetterQueue, "other"), constant(ts, n)),
				series(m, with(scope, "namespace", "other-namespace"), constant(ts, n)),
			}},
		}}
	}
	return map[string]alertCase{
		render.AlertDeadLetterQueueSize:          thresholdCase(opmetrics.DeadLetterQueueMessages, scope, opmetrics.LabelDeadLetterQueue, float64(th.MaxMessages), th.MaxMessagesFor),
		render.AlertDeadLetterQueueGrowth:        growth(),
		render.AlertDeadLetterQueueOldestMessage: oldest(),
	}
}

// humanize and humanizeDuration reproduce Prometheus's template functions for values of at least 1.
func humanize(t *testing.T, v float64) string {
	if v == 0 {
		return "0"
	}
	if v < 1 {
		t.Fatalf("humanize(%v): the test covers values of at least 1 only", v)
	}
	prefix := ""
	for _, p := range []string{"k", "M", "G", "T", "P", "E", "Z", "Y"} {
		if math.Abs(v) < 1000 {
			break
		}
		prefix, v = p, v/1000
	}
	return fmt.Sprintf("%.4g%s", v, prefix)
}

func humanizeDuration(t *testing.T, v float64) string {
	if v < 1 {
		t.Fatalf("humanizeDuration(%v): the test covers values of at least 1 only", v)
	}
	d := int64(v)
	s, m, h, days := d%60, (d/60)%60, (d/3600)%24, d/86400
	switch {
	case days != 0:
		return fmt.Sprintf("%dd %dh %dm %ds", days, h, m, s)
	case h != 0:
		return fmt.Sprintf("%dh %dm %ds", h, m, s)
	case m != 0:
		return fmt.Sprintf("%dm %ds", m, s)
	}
	return fmt.Sprintf("%.4gs", v)
}

// expand fills the only templates the rules may use.
func expand(t *testing.T, annotations map[string]string, v float64) map[string]string {
	out := map[string]string{}
	for k, s := range annotations {
		if strings.Contains(s, "{{ $value | humanize }}") {
			s = strings.ReplaceAll(s, "{{ $value | humanize }}", humanize(t, v))
		}
		if strings.Contains(s, "{{ $value | humanizeDuration }}") {
			s = strings.ReplaceAll(s, "{{ $value | humanizeDuration }}", humanizeDuration(t, v))
		}
		if strings.Contains(s, "{{") {
			t.Fatalf("annotation %s uses a template the test does not know: %s", k, s)
		}
		out[k] = s
	}
	return out
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
			file := promTestFile{RuleFiles: []string{"rules.yaml"}, EvaluationInterval: render.PromDuration(c.interval)}
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
			in.Pipeline.Spec.Alerts = &v1.PipelineAlerts{MaxConsumerLag: ptr.To[int64](50), MaxRetryBacklog: ptr.To[int64](20), For: pdur(2 * time.Minute)}
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
	all := []string{render.AlertDeadLetterQueueSize, render.AlertDeadLetterQueueGrowth, render.AlertDeadLetterQueueOldestMessage}
	for _, tc := range []struct {
		name string
		dlq  func(*testing.T) *v1.DeadLetterQueue
	}{
		{"the seed defaults", func(*testing.T) *v1.DeadLetterQueue { return defaultDLQ() }},
		{"custom thresholds", func(t *testing.T) *v1.DeadLetterQueue { return sinkRefSecretsInputs(t).DLQ }},
		{"a slow status refresh widens the growth window", func(*testing.T) *v1.DeadLetterQueue {
			d := defaultDLQ()
			d.Spec.StatusRefreshInterval = pdur(5 * time.Minute)
			d.Spec.Alerts = &v1.DeadLetterAlerts{MaxGrowthPerMinute: ptr.To[int32](1), MaxGrowthFor: pdur(20 * time.Minute)}
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
