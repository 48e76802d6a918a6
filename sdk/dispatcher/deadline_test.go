package dispatcher_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// TestDeadlineExceeded: a record already older than the policy's deadline is dead-lettered with
// reason deadline_exceeded without being delivered, and a failing record whose next retry would fall
// due after the deadline is dead-lettered after its one delivery. Every exported metric is
// registered and the dead-letter counters count by reason.
func TestDeadlineExceeded(t *testing.T) {
	// The deadline is 5s; "late-retry" is 2s old, so its first retry (4s later) would fall due after
	// the deadline; "old" is past it already.
	pol := simplePolicy(5, 4*time.Second)
	pol.Deadline = dt.PD(5 * time.Second)
	p := newPipeline(t, "deadline", 1, pol, func(r *dt.Request) dt.Response {
		if string(r.Body) == "late-retry" {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	})
	reg := prometheus.NewRegistry()
	// On a fake clock that stands still, "late-retry" is 2s old when it is delivered however long
	// the delivery takes to come.
	fc := clocktesting.NewFakeClock(time.Now())
	start(t, dispatcher.Options{Config: p.cfg, Registerer: reg, Clock: fc})
	dt.Produce(t, p.prod,
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("old"), Value: []byte("old"), Timestamp: fc.Now().Add(-10 * time.Second)},
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("late-retry"), Value: []byte("late-retry"), Timestamp: fc.Now().Add(-2 * time.Second)},
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("fresh"), Value: []byte("fresh")},
	)
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 2, 20*time.Second)
	if len(dl) != 2 {
		t.Fatalf("dead letters: %d", len(dl))
	}
	for _, r := range dl {
		reason, _ := dt.Header(r, headers.Reason)
		attempts, _ := dt.Header(r, headers.Attempts)
		want := map[string]string{"old": "0", "late-retry": "1"}[string(r.Key)]
		if reason != headers.ReasonDeadlineExceeded || attempts != want {
			t.Errorf("%s: reason %s attempts %s, want deadline_exceeded after %s", r.Key, reason, attempts, want)
		}
	}
	p.sink.WaitFor(t, 10*time.Second, func([]*dt.Request) bool { keys, _ := p.sink.Succeeded(); return keys == 1 }, "fresh delivered")
	for _, r := range p.sink.Requests() {
		if string(r.Body) == "old" {
			t.Error("the expired record was delivered")
		}
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, mf := range mfs {
		got[mf.GetName()] = true
		if !metrics.Exported(mf.GetName()) {
			t.Errorf("metric %s is not in metrics.All", mf.GetName())
		}
		if mf.GetName() == metrics.DeadLettersTotal {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == metrics.LabelReason && l.GetValue() == headers.ReasonDeadlineExceeded && m.GetCounter().GetValue() != 2 {
						t.Errorf("dead_letters_total{reason=deadline_exceeded} = %v", m.GetCounter().GetValue())
					}
				}
			}
		}
	}
	for _, d := range metrics.All {
		if !got[d.Name] {
			t.Errorf("metric %s is not exported", d.Name)
		}
		if !strings.HasPrefix(d.Name, "retryops_") {
			t.Errorf("metric %s lacks the retryops_ prefix", d.Name)
		}
	}
}
