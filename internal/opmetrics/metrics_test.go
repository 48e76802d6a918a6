package opmetrics_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/retryops/retry-operator/internal/opmetrics"
	dispatchermetrics "github.com/retryops/retry-operator/sdk/metrics"
)

func ptr[T any](v T) *T { return &v }

// gather returns the families of reg by name.
func gather(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value returns the value of the one gauge c collects.
func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	close(ch)
	var m dto.Metric
	n := 0
	for metric := range ch {
		n++
		if err := metric.Write(&m); err != nil {
			t.Fatalf("Write: %v", err)
		}
	}
	if n != 1 {
		t.Fatalf("collected %d series, want 1", n)
	}
	return m.GetGauge().GetValue()
}

// count returns the number of series c collects.
func count(t *testing.T, c prometheus.Collector) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	c.Collect(ch)
	close(ch)
	return len(ch)
}

func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		out = append(out, l.GetName())
	}
	return out
}

func TestRegisterExportsEveryNameOfAllWithItsLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := opmetrics.Register(reg)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	m.SetDeadLetterQueue("shop", "orders-dlq", opmetrics.DeadLetterQueueFigures{
		Messages: 3, Oldest: time.Unix(1700000000, 0), ByReason: map[string]int64{"max_retries_exceeded": 3},
	})
	m.SetConsumerPipeline("shop", "orders", opmetrics.ConsumerPipelineFigures{
		ConsumerLag: ptr[int64](1), RetryBacklog: ptr[int64](2), DueLag: ptr[int64](1), DeadLetterMessages: ptr[int64](3), ReadyReplicas: ptr[int32](4), Circuit: "Open",
	})
	m.SetRetryPolicy("shop", "standard", 5)

	fams := gather(t, reg)
	if len(fams) != len(opmetrics.All) {
		t.Errorf("gathered %d families, All lists %d", len(fams), len(opmetrics.All))
	}
	for _, d := range opmetrics.All {
		f, ok := fams[d.Name]
		if !ok {
			t.Errorf("%s is in All but not registered", d.Name)
			continue
		}
		if f.GetType() != dto.MetricType_GAUGE || d.Type != "gauge" {
			t.Errorf("%s: type %v, All says %q", d.Name, f.GetType(), d.Type)
		}
		if len(f.GetMetric()) != 1 {
			t.Fatalf("%s: %d series, want 1", d.Name, len(f.GetMetric()))
		}
		got := labelNames(f.GetMetric()[0])
		want := slices.Clone(d.Labels)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v, want %v", d.Name, got, want)
		}
		if !opmetrics.Exported(d.Name) {
			t.Errorf("Exported(%q) = false", d.Name)
		}
		if !strings.HasPrefix(d.Name, "retryops_") {
			t.Errorf("%s lacks the retryops_ prefix", d.Name)
		}
		if dispatchermetrics.Exported(d.Name) {
			t.Errorf("%s is also a dispatcher metric", d.Name)
		}
	}
	if opmetrics.Exported("retryops_deadletterqueue_message") || opmetrics.Exported("up") {
		t.Errorf("Exported accepts names that are not exported")
	}
	if got := value(t, m.DeadLetterQueueOldestMessageTimestamp.WithLabelValues("shop", "orders-dlq")); got != 1700000000 {
		t.Errorf("oldest timestamp = %v, want 1700000000", got)
	}
}

func TestRegisterTwiceOnOneRegistryReusesTheCollectors(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := opmetrics.Register(reg)
	if err != nil {
		t.Fatalf("first Register: %v", err)
	}
	b, err := opmetrics.Register(reg)
	if err != nil {
		t.Fatalf("second Register: %v", err)
	}
	b.SetRetryPolicy("ns", "p", 7)
	if got := value(t, a.RetryPolicyDeadLetterMessages.WithLabelValues("ns", "p")); got != 7 {
		t.Errorf("the first Metrics sees %v, want 7 set through the second", got)
	}
}

func TestRegisterFailsOnAClashingCollectorOfAnotherType(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: opmetrics.DeadLetterQueueMessages, Help: "x"}))
	if _, err := opmetrics.Register(reg); err == nil {
		t.Fatal("Register succeeded over a clashing collector")
	}
}

func TestSetDeadLetterQueueOfAnEmptyQueueRemovesTheOldestTimestampAndStaleReasons(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := opmetrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetDeadLetterQueue("ns", "dlq", opmetrics.DeadLetterQueueFigures{
		Messages: 2, Oldest: time.Unix(100, 0), ByReason: map[string]int64{"undeliverable": 1, "deadline_exceeded": 1},
	})
	m.SetDeadLetterQueue("ns", "other", opmetrics.DeadLetterQueueFigures{
		Messages: 1, Oldest: time.Unix(100, 0), ByReason: map[string]int64{"undeliverable": 1},
	})
	m.SetDeadLetterQueue("ns", "dlq", opmetrics.DeadLetterQueueFigures{Messages: 0})
	if n := count(t, m.DeadLetterQueueOldestMessageTimestamp); n != 1 {
		t.Errorf("oldest timestamp series = %d, want 1 (only the other queue's)", n)
	}
	if n := count(t, m.DeadLetterQueueMessagesByReason); n != 1 {
		t.Errorf("by-reason series = %d, want 1 (only the other queue's)", n)
	}
	if got := value(t, m.DeadLetterQueueMessages.WithLabelValues("ns", "dlq")); got != 0 {
		t.Errorf("messages = %v, want 0", got)
	}

	m.DeleteDeadLetterQueue("ns", "other")
	m.DeleteDeadLetterQueue("ns", "dlq")
	for _, v := range []*prometheus.GaugeVec{m.DeadLetterQueueMessages, m.DeadLetterQueueOldestMessageTimestamp, m.DeadLetterQueueMessagesByReason} {
		if n := count(t, v); n != 0 {
			t.Errorf("%d series left after DeleteDeadLetterQueue", n)
		}
	}
}

func TestConsumerPipelineUnknownFiguresAndDeletionRemoveSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := opmetrics.Register(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.SetConsumerPipeline("ns", "p", opmetrics.ConsumerPipelineFigures{
		ConsumerLag: ptr[int64](1), RetryBacklog: ptr[int64](2), DueLag: ptr[int64](1), DeadLetterMessages: ptr[int64](3), ReadyReplicas: ptr[int32](4), Circuit: "Open",
	})
	if got := value(t, m.ConsumerPipelineCircuitState.WithLabelValues("ns", "p")); got != 2 {
		t.Errorf("circuit state = %v, want 2 (Open)", got)
	}
	m.SetConsumerPipeline("ns", "p", opmetrics.ConsumerPipelineFigures{ReadyReplicas: ptr[int32](1), Circuit: "HalfOpen"})
	if got := value(t, m.ConsumerPipelineCircuitState.WithLabelValues("ns", "p")); got != 1 {
		t.Errorf("circuit state = %v, want 1 (HalfOpen)", got)
	}
	m.SetConsumerPipeline("ns", "p", opmetrics.ConsumerPipelineFigures{ReadyReplicas: ptr[int32](1)})
	if n := count(t, m.ConsumerPipelineConsumerLag); n != 0 {
		t.Errorf("an unknown lag left %d series", n)
	}
	if n := count(t, m.ConsumerPipelineCircuitState); n != 0 {
		t.Errorf("a pipeline without a circuit breaker left %d circuit series", n)
	}
	if got := value(t, m.ConsumerPipelineReadyReplicas.WithLabelValues("ns", "p")); got != 1 {
		t.Errorf("ready replicas = %v, want 1", got)
	}
	m.SetRetryPolicy("ns", "rp", 1)
	m.DeleteConsumerPipeline("ns", "p")
	m.DeleteRetryPolicy("ns", "rp")
	if fams := gather(t, reg); len(fams) != 0 {
		t.Errorf("series left after deletion: %v", fams)
	}
}
