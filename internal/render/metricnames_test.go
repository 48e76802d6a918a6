package render_test

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	dmetrics "github.com/retryops/retry-operator/internal/dispatcher/metrics"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/render"
)

var (
	reString    = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	reNameMatch = regexp.MustCompile(`__name__\s*=\s*"([^"]+)"`)
	reBraces    = regexp.MustCompile(`\{[^}]*\}`)
	reBrackets  = regexp.MustCompile(`\[[^\]]*\]`)
	reGrouping  = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	reOffset    = regexp.MustCompile(`\boffset\s+-?[0-9a-z]+`)
	reNumber    = regexp.MustCompile(`(?i)\b(?:0x[0-9a-f]+|[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?)\b`)
	reIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// A selector with matchers: the metric name, then its matchers.
	reSelector = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}`)
	reMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"`)
)

// promqlWords are PromQL keywords and literals that look like identifiers.
var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// metricNames extracts the metric names an expression selects: identifiers that are not functions or
// aggregations (followed by "("), keywords, label names (inside braces or grouping lists), strings,
// numbers or durations; plus names given as {__name__="..."}.
func metricNames(expr string) []string {
	var names []string
	for _, m := range reNameMatch.FindAllStringSubmatch(expr, -1) {
		names = append(names, m[1])
	}
	s := reString.ReplaceAllString(expr, `""`)
	s = reBraces.ReplaceAllString(s, " ")
	s = reBrackets.ReplaceAllString(s, " ")
	s = reGrouping.ReplaceAllString(s, " ")
	s = reOffset.ReplaceAllString(s, " ")
	s = reNumber.ReplaceAllString(s, " ")
	for _, loc := range reIdent.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if promqlWords[word] || strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t\n"), "(") {
			continue
		}
		names = append(names, word)
	}
	sort.Strings(names)
	return slices.Compact(names)
}

func TestMetricNamesTokenizer(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (le, pipeline) (rate(foo_bucket{a="b", c=~"x|y"}[5m])) / ignoring(x) bar offset 5m > bool 1e3`, []string{"bar", "foo_bucket"}},
		{`(sum(up{job="a"}) or vector(0)) < 1 and on(namespace) group_left(pod) baz`, []string{"baz", "up"}},
		{`time() - min by (namespace) (ts_seconds{q="a{b}"} > 0) > 86400`, []string{"ts_seconds"}},
		{`max_over_time(x[1h:5m]) unless {__name__="y", z="w"}`, []string{"x", "y"}},
		{`histogram_quantile(0.99, sum without (pod) (rate(d_seconds_bucket[5m]))) > 0x1F`, []string{"d_seconds_bucket"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%s) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

// labelsOf returns the label names a metric may be selected by: its own, plus the target label
// namespace that Prometheus adds to the dispatcher's series (the operator's carry it themselves).
func labelsOf(name string) ([]string, bool) {
	for _, d := range dmetrics.All {
		if name == d.Name || strings.HasPrefix(name, d.Name+"_") && d.Type == "histogram" {
			return append([]string{"namespace"}, d.Labels...), true
		}
	}
	for _, d := range opmetrics.All {
		if name == d.Name {
			return d.Labels, true
		}
	}
	return nil, false
}

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
	zero.Pipeline.Spec.Autoscaling = &v1.PipelineAutoscaling{MinReplicas: ptr.To[int32](0), MaxReplicas: 4}
	f, err := render.AlertRules(zero)
	if err != nil {
		t.Fatal(err)
	}
	files["pipeline: may scale to zero"] = f
	for name, d := range map[string]*v1.DeadLetterQueue{"defaults": defaultDLQ(), "custom": sinkRefSecretsInputs(t).DLQ} {
		f, err := render.DeadLetterQueueAlertRules(&render.DeadLetterQueueInputs{DLQ: d})
		if err != nil {
			t.Fatal(err)
		}
		files["dlq: "+name] = f
	}
	return files
}

// TestEveryMetricOfTheRulesIsExported checks that every metric an alert expression selects is
// exported by the dispatcher (internal/dispatcher/metrics) or the operator (internal/opmetrics), and
// that every label it matches on is one that metric has.
func TestEveryMetricOfTheRulesIsExported(t *testing.T) {
	alerts := map[string]bool{}
	for file, f := range renderedRuleFiles(t) {
		for _, g := range f.Groups {
			for _, r := range g.Rules {
				alerts[r.Alert] = true
				names := metricNames(r.Expr)
				if len(names) == 0 {
					t.Errorf("%s: %s selects no metric: %s", file, r.Alert, r.Expr)
				}
				for _, n := range names {
					if !dmetrics.Exported(n) && !opmetrics.Exported(n) {
						t.Errorf("%s: %s uses %s, which neither the dispatcher nor the operator exports", file, r.Alert, n)
					}
				}
				sels := reSelector.FindAllStringSubmatch(r.Expr, -1)
				if len(sels) == 0 {
					t.Errorf("%s: %s has an unscoped selector: %s", file, r.Alert, r.Expr)
				}
				for _, sel := range sels {
					labels, ok := labelsOf(sel[1])
					if !ok {
						t.Errorf("%s: %s selects unknown metric %s", file, r.Alert, sel[1])
						continue
					}
					var used []string
					for _, m := range reMatcher.FindAllStringSubmatch(sel[2], -1) {
						used = append(used, m[1])
						if !slices.Contains(labels, m[1]) {
							t.Errorf("%s: %s matches %s on label %s, which it does not have (%v)", file, r.Alert, sel[1], m[1], labels)
						}
					}
					if !slices.Contains(used, "namespace") || len(used) < 2 {
						t.Errorf("%s: %s: selector %s is not scoped to one resource (namespace and name)", file, r.Alert, sel[0])
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
		var unknown []string
		for _, n := range metricNames(expr) {
			if !dmetrics.Exported(n) && !opmetrics.Exported(n) {
				unknown = append(unknown, n)
			}
		}
		if len(unknown) == 0 {
			t.Errorf("%s passed the check", expr)
		}
	}
}
