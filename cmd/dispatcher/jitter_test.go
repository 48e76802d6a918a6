package main_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
)

// TestJitterSurvivesTiersInProcess is the jitter acceptance test on the dispatcher
// binary, which runs on the real clock: 1,000 records fail under proportional jitter x U(0.8, 1.2)
// of a 5 s delay. The due times the binary writes lie within [4 s, 6 s] of each failure and are
// distributed over it as the policy says (Kolmogorov-Smirnov p > 1e-6: the binary's jitter is not
// seeded, so a looser bound would fail a true uniform sample by chance, one run in a hundred at
// p > 0.01, while a narrowed window over 1,000 samples gives p far below 1e-20); every retry arrives at the
// sink no sooner than its due time; and the retries arrive in the order of their due times (Spearman
// rank correlation above 0.9). A tier that released its records only when the head before them
// fell due bunched them at the window's end, in the tier's order (a correlation near 0). Real
// time is bounded only from below: how late a retry comes depends on the machine's load, its
// order among the others hardly does.
func TestJitterSurvivesTiersInProcess(t *testing.T) {
	skipUnderShort(t)
	const n = 1000
	bin := dispatcherBinary(t)
	const group, src, dlq = "jitter", "jitter.src", "jitter.dlq"
	pol := &policy.Spec{
		MaxAttempts: 2,
		Backoff: policy.Backoff{InitialDelay: dt.D(5 * time.Second), Multiplier: "2", MaxDelay: dt.D(time.Minute),
			Jitter: &policy.Jitter{Mode: policy.JitterProportional, MinPercent: ptrTo[int32](80), MaxPercent: ptrTo[int32](120)}},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"503"}},
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

	due := make(map[string]time.Time, n)
	var delays []float64
	tier := cfg.Topics.Retries[0].Name
	for _, r := range dt.ReadTopic(t, c, tier, n, 20*time.Second) {
		v, _ := dt.Header(r, headers.Due)
		f, _ := dt.Header(r, headers.FirstFailure)
		at, err1 := headers.ParseTime(v)
		failed, err2 := headers.ParseTime(f)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: due %q, first failure %q", r.Value, v, f)
		}
		d := at.Sub(failed)
		if d < 4*time.Second || d > 6*time.Second {
			t.Errorf("%s: due %v after its failure, outside the jitter window [4s, 6s]", r.Value, d)
		}
		due[string(r.Value)] = at
		delays = append(delays, d.Seconds())
	}
	if len(due) != n {
		t.Fatalf("%d retry records in %s, want %d", len(due), tier, n)
	}
	slices.Sort(delays)
	var dec []string
	for q := 1; q <= 10; q++ {
		dec = append(dec, strconv.FormatFloat(delays[min(q*len(delays)/10, len(delays)-1)], 'f', 3, 64))
	}
	d, p := dt.KSUniform(delays, 4, 6)
	t.Logf("due times after the failure (deciles, s) %v; KS D = %.4f, p = %.3g", dec, d, p)
	if p <= 1e-6 {
		t.Errorf("the due times are not distributed as the policy's jitter: KS p = %.3g (D = %.4f)", p, d)
	}

	var retries []*dt.Request
	var late time.Duration
	for _, r := range sink.Requests() {
		if r.Attempt != 2 {
			continue
		}
		retries = append(retries, r)
		at := due[string(r.Body)]
		if r.At.Before(at) {
			t.Errorf("%s arrived %v before its due time", r.Body, at.Sub(r.At))
		}
		late = max(late, r.At.Sub(at))
	}
	slices.SortStableFunc(retries, func(a, b *dt.Request) int { return a.At.Compare(b.At) })
	byDue := slices.Clone(retries)
	slices.SortStableFunc(byDue, func(a, b *dt.Request) int { return due[string(a.Body)].Compare(due[string(b.Body)]) })
	rank := make(map[*dt.Request]int, len(byDue))
	for i, r := range byDue {
		rank[r] = i
	}
	var sq float64
	for i, r := range retries {
		diff := float64(i - rank[r])
		sq += diff * diff
	}
	k := float64(len(retries))
	rho := 1 - 6*sq/(k*(k*k-1))
	t.Logf("retries in the order of their due times: Spearman rho = %.4f; the latest %v after its due time", rho, late.Round(time.Millisecond))
	if rho < 0.9 {
		t.Errorf("the retries did not arrive in the order of their due times: Spearman rho = %.4f", rho)
	}
}

func ptrTo[T any](v T) *T { return &v }
