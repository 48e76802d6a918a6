package promcheck_test

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/promcheck"
)

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
		if got := promcheck.MetricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("MetricNames(%s) = %v, want %v", tc.expr, got, tc.want)
		}
	}
}

func TestProblems(t *testing.T) {
	for _, tc := range []struct {
		expr, want string
	}{
		{`max by (namespace) (retryops_dlq_size{namespace="a"}) > 1`, "uses retryops_dlq_size"},
		{`up{namespace="a", job="retryops"} == 0`, "uses up"},
		{`rate(retryops_dispatcher_records{namespace="a"}[5m]) > 0`, "uses retryops_dispatcher_records,"},
		{`rate(retryops_dispatcher_records_total{consumerpipeline="a"}[5m])`, "on label consumerpipeline"},
		{`retryops_consumerpipeline_due_lag{pipeline="a"}`, "on label pipeline"},
		{`sum(rate(retryops_deadletter_actions_total{namespace="a"}[5m]))`, "on label namespace"},
		{`vector(1)`, "selects no metric"},
		{`rate(retryops_dispatcher_delivery_duration_seconds_bucket{namespace="a", pipeline="b"}[5m])`, ""},
		{`time() - retryops_deadletterqueue_oldest_message_timestamp_seconds{namespace="a", deadletterqueue="q"}`, ""},
		{`sum by (action) (rate(retryops_deadletter_action_records_total{action="Replay"}[5m]))`, ""},
	} {
		got := strings.Join(promcheck.Problems(tc.expr), "; ")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("Problems(%s) = %q, want one with %q", tc.expr, got, tc.want)
		}
	}
}

// TestTheActionCountersLabels checks the labels promcheck knows for the action counters against the
// series the operator really exports.
func TestTheActionCountersLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := opmetrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.CountDeadLetterAction("Replay", "Succeeded", 3)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "retryops_deadletter_action") {
			continue
		}
		seen++
		var got []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			got = append(got, l.GetName())
		}
		want, ok := promcheck.LabelsOf(f.GetName())
		if !ok || !promcheck.Exported(f.GetName()) {
			t.Errorf("%s is exported but promcheck does not know it", f.GetName())
		}
		want = slices.Clone(want)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s has labels %v, promcheck says %v", f.GetName(), got, want)
		}
	}
	if seen != 2 {
		t.Errorf("found %d action counters, want 2", seen)
	}
}

func TestParseWithPromtool(t *testing.T) {
	promtool, err := promcheck.Promtool(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("promtool is needed (hack/setup-prometheus.sh): %v", err)
	}
	if err := promcheck.ParseWithPromtool(promtool, []string{`sum(rate(a_total[5m]))`, `time() - b`}); err != nil {
		t.Errorf("valid expressions refused: %v", err)
	}
	err = promcheck.ParseWithPromtool(promtool, []string{`sum(rate(a_total[5m]))`, `sum by (x (b)`})
	if err == nil || !strings.Contains(err.Error(), "Expr1") {
		t.Errorf("an unbalanced expression passed or was not named: %v", err)
	}
}
