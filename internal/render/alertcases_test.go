package render_test

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/opmetrics"
	"github.com/retryops/retry-operator/internal/render"
	dmetrics "github.com/retryops/retry-operator/sdk/metrics"
)

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

func dlqAlertCases(t *testing.T, d *retryv1alpha1.DeadLetterQueue) map[string]alertCase {
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
	// oldest evaluates every quarter of f, however long: promtool evaluates from the epoch to the
	// crossing, and a week at one evaluation a minute takes half a minute per scenario. The series
	// keep a sample a minute, within Prometheus's lookback.
	oldest := func(age, f time.Duration) alertCase {
		ev := max(f/4, 15*time.Second)
		iv := min(ev, time.Minute)
		const ts = 60 // the oldest dead letter's timestamp: one minute after the test's epoch
		crossing := age + ts*time.Second
		at := crossing + f + 2*ev
		n := samples(at, iv)
		m := opmetrics.DeadLetterQueueOldestMessageTimestamp
		return alertCase{interval: iv, evaluation: ev, scenarios: []scenario{
			{name: "fires when older than the limit for its duration", at: at, fires: true, value: (at.Truncate(ev) - ts*time.Second).Seconds(),
				series: []promSeries{series(m, scope, constant(ts, n))}},
			{name: "silent at exactly the limit", at: crossing,
				series: []promSeries{series(m, scope, constant(ts, n))}},
			{name: "silent when older than the limit for less than its duration", at: crossing + f - ev,
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
		render.AlertDeadLetterQueueOldestMessage: oldest(th.MaxOldestAge, render.OldestMessageFor),
		// The third tier: the same measures at the escalation thresholds, so the cases prove it fires
		// above them and not at them (nor at the warning thresholds below them).
		render.AlertDeadLetterQueueSizeEscalation:          thresholdCase(opmetrics.DeadLetterQueueMessages, scope, opmetrics.LabelDeadLetterQueue, float64(th.EscalateMessages), th.MaxMessagesFor),
		render.AlertDeadLetterQueueOldestMessageEscalation: oldest(th.EscalateOldestAge, render.OldestMessageEscalationFor),
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
