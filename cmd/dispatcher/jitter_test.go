package main_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher/config"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
)

// TestJitterSurvivesTiersInProcess is the jitter acceptance test of issue 13 on the dispatcher
// binary (no race detector): 1,000 records fail within one second under proportional jitter
// x U(0.8, 1.2) of a 5 s delay; the delays from each failed delivery's answer to its retry's arrival
// are distributed over [4 s, 6 s] as the policy says (Kolmogorov-Smirnov p > 0.01), none outside
// the window by more than 20 ms. A tier that released its records only when the head before them
// fell due bunched them at the window's end.
func TestJitterSurvivesTiersInProcess(t *testing.T) {
	const n = 1000
	bin := dispatcherBinary(t)
	const group, src, dlq = "jitter", "jitter.src", "jitter.dlq"
	pol := &v1.RetryPolicySpec{
		MaxAttempts: 2,
		Backoff: v1.Backoff{InitialDelay: dt.D(5 * time.Second), Multiplier: "2", MaxDelay: dt.D(time.Minute),
			Jitter: &v1.Jitter{Mode: v1.JitterProportional, MinPercent: ptrTo[int32](80), MaxPercent: ptrTo[int32](120)}},
		Classification: &v1.Classification{DefaultAction: "DeadLetter", Rules: []v1.ClassificationRule{
			{Name: "transient", Action: v1.ActionRetry, HTTPStatuses: []v1.HTTPStatusMatch{"503"}},
		}},
	}
	sink := dt.NewSink(t, func(r *dt.Request) dt.Response {
		if r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	})
	cfg := dt.Config(nil, group, src, dlq, pol, sink.URL)
	c := clusterFor(t, cfg, 4, 2)
	cfg.Delivery.MaxInFlight = 100
	cfg.Listen = config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled}
	cfgPath, logPath := writeConfig(t, t.TempDir(), cfg)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: src, Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, dt.Client(t, c), recs...) // all waiting: the failures come as one burst
	startDispatcher(t, bin, cfgPath, logPath)
	sink.WaitFor(t, 60*time.Second, func(reqs []*dt.Request) bool {
		retried := 0
		for _, r := range reqs {
			if r.Attempt == 2 {
				retried++
			}
		}
		return retried == n
	}, "every record retried once")

	failedAt, retriedAt := map[string]time.Time{}, map[string]time.Time{}
	for _, r := range sink.Requests() {
		if r.Attempt == 1 {
			failedAt[r.Key] = r.At
		} else {
			retriedAt[r.Key] = r.At
		}
	}
	var delays []float64
	var first, last time.Time
	outside := 0
	var over time.Duration
	for k, f := range failedAt {
		if first.IsZero() || f.Before(first) {
			first = f
		}
		if f.After(last) {
			last = f
		}
		d := retriedAt[k].Sub(f)
		if d < 4*time.Second-20*time.Millisecond || d > 6*time.Second+20*time.Millisecond {
			outside++
		}
		over = max(over, d-6*time.Second)
		delays = append(delays, d.Seconds())
	}
	if spread := last.Sub(first); spread > time.Second {
		t.Fatalf("the first deliveries took %v; the test needs them to fail within one second", spread)
	}
	slices.Sort(delays)
	var dec []string
	for q := 1; q <= 10; q++ {
		dec = append(dec, strconv.FormatFloat(delays[min(q*len(delays)/10, len(delays)-1)], 'f', 3, 64))
	}
	d, p := dt.KSUniform(delays, 4, 6)
	t.Logf("%d failures within %v; retry delays (deciles, s) %v; KS D = %.4f, p = %.3g; %d outside the window by more than 20 ms; latest past its end %v",
		len(delays), last.Sub(first).Round(time.Millisecond), dec, d, p, outside, over)
	if p <= 0.01 {
		t.Errorf("the retry delays are not distributed as the policy's jitter: KS p = %.3g (D = %.4f)", p, d)
	}
	if outside > 0 {
		t.Errorf("%d retries came more than 20 ms outside the jitter window [4s, 6s]", outside)
	}
}

func ptrTo[T any](v T) *T { return &v }
