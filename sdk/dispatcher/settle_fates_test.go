package dispatcher_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// counter returns the value of the series of name whose label has value (summed over the other
// labels), 0 when there is none.
func counterValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}

// endOffsets returns the end offset of every partition of topic.
func endOffsetsOf(t *testing.T, cl *kgo.Client, topic string) map[int32]int64 {
	t.Helper()
	eo, err := kadm.NewClient(cl).ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	eo.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	return out
}

// fatesHandler gives each record the fate its value names: ok, drop (410, dropped by the policy),
// dead (undeliverable), retry (503 then success), exhausted (503 every time: retried, then
// dead-lettered), panic.
var fatesHandler = dispatcher.HandlerFunc(func(_ context.Context, d *dispatcher.Delivery) dispatcher.Result {
	switch string(d.Record.Value) {
	case "ok":
		return dispatcher.Result{Success: true}
	case "drop":
		return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 410}}
	case "dead":
		return dispatcher.Result{Undeliverable: true}
	case "retry":
		if d.Attempt == 1 {
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}
		}
		return dispatcher.Result{Success: true}
	case "exhausted":
		return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}
	case "panic":
		panic("a handler that panics")
	}
	return dispatcher.Result{Success: true}
})

// TestEveryFateSettlesOnce: records of every fate, interleaved on two partitions through a
// single delivery slot (so every next record reaches its worker through the hand-off of settle,
// the one after a panic included), are each settled exactly once: the outcome counters are exactly
// one per record and fate, each dead letter is written once, every source and tier partition is
// committed to its end, and nothing is left in flight or uncommitted. A path that settles twice
// counts twice (or frees a slot twice); one that never settles leaves its partition uncommitted.
func TestEveryFateSettlesOnce(t *testing.T) {
	kinds := []string{"ok", "drop", "dead", "retry", "exhausted", "panic"}
	const perKind = 10
	pol := simplePolicy(2, 10*time.Millisecond)
	pol.Classification.Rules = append(pol.Classification.Rules,
		policy.ClassificationRule{Name: "gone", Action: policy.ActionDrop, HTTPStatuses: []policy.HTTPStatusMatch{"410"}})
	p := newPipeline(t, "review-fates", 2, pol, nil)
	p.cfg.Delivery.MaxInFlight = 1
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: fatesHandler, Registerer: reg})

	src := p.cfg.Topics.Source
	var recs []*kgo.Record
	for i := range perKind * len(kinds) {
		recs = append(recs, &kgo.Record{Topic: src, Partition: int32(i % 2), Key: []byte(strconv.Itoa(i)), Value: []byte(kinds[i%len(kinds)])})
	}
	prod := dt.Client(t, p.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	dt.Produce(t, prod, recs...)

	want := map[string]float64{
		metrics.OutcomeSuccess:      2 * perKind, // ok, retry on its second attempt
		metrics.OutcomeRetried:      2 * perKind, // retry, exhausted
		metrics.OutcomeDeadLettered: 3 * perKind, // dead, exhausted, panic
		metrics.OutcomeDropped:      perKind,
	}
	tiers := p.cfg.Topics.Retries.Names()
	dt.Eventually(t, 60*time.Second, func() bool {
		for _, topic := range append([]string{src}, tiers...) {
			for part, end := range endOffsetsOf(t, p.prod, topic) {
				if p.committed(t, topic, part) != end {
					return false
				}
			}
		}
		return counterValue(t, reg, metrics.RecordsTotal, metrics.LabelOutcome, metrics.OutcomeDeadLettered) == want[metrics.OutcomeDeadLettered]
	}, "every source and tier partition committed to its end")

	for outcome, n := range want {
		if got := counterValue(t, reg, metrics.RecordsTotal, metrics.LabelOutcome, outcome); got != n {
			t.Errorf("records_total{outcome=%s} = %v, want %v", outcome, got, n)
		}
	}
	if got := dt.Gauge(reg, metrics.PanicsTotal); got != perKind {
		t.Errorf("panics_total = %v, want %v", got, perKind)
	}
	for _, g := range []string{metrics.InFlight, metrics.Uncommitted, metrics.Buffered, metrics.StuckDeadLetters} {
		if v := dt.Gauge(reg, g); v != 0 {
			t.Errorf("%s = %v after every record settled, want 0", g, v)
		}
	}
	if tierEnd := endOffsetsOf(t, p.prod, tiers[0]); tierEnd[0]+tierEnd[1] != 2*perKind {
		t.Errorf("the tier holds %v records, want %d (one per retry and exhausted record)", tierEnd, 2*perKind)
	}
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 3*perKind+1, 2*time.Second)
	seen := map[string]string{}
	for _, r := range dl {
		part, _ := dt.Header(r, headers.OriginalPartition)
		off, _ := dt.Header(r, headers.OriginalOffset)
		reason, _ := dt.Header(r, headers.Reason)
		k := part + "/" + off
		if prev, ok := seen[k]; ok {
			t.Errorf("source record %s dead-lettered twice (%s, then %s)", k, prev, reason)
		}
		seen[k] = reason
	}
	if len(dl) != 3*perKind {
		t.Errorf("%d dead letters, want %d", len(dl), 3*perKind)
	}
}
