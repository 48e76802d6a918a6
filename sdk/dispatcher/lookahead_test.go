package dispatcher_test

import (
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
)

func TestKSUniform(t *testing.T) {
	even := make([]float64, 1000)
	for i := range even {
		even[i] = 4 + 2*(float64(i)+0.5)/1000
	}
	if _, p := dt.KSUniform(even, 4, 6); p < 0.99 {
		t.Errorf("evenly spread sample: p = %.3g, want about 1", p)
	}
	top := make([]float64, 1000)
	for i := range top {
		top[i] = 5.9 + 0.1*float64(i)/1000 // everything in the window's top 5%
	}
	if _, p := dt.KSUniform(top, 4, 6); p > 1e-6 {
		t.Errorf("sample bunched at the top: p = %.3g, want about 0", p)
	}
}

// TestJitterSurvivesTiers: 1,000 records fail at one instant of the engine's fake clock under
// proportional jitter x U(0.8, 1.2) of a 5 s delay. The due times the engine writes spread over
// [4 s, 6 s] as the policy says (a Kolmogorov-Smirnov test does not tell them from U(4 s, 6 s),
// p > 0.01), and as the test steps the clock through the window each retry is delivered once the
// clock reaches its due time, never before. A tier partition that released its records in order,
// each when the head before it fell due, bunched them at the window's end: its
// records due early would not come at their step.
func TestJitterSurvivesTiers(t *testing.T) {
	const n = 1000
	const step = 50 * time.Millisecond
	pol := simplePolicy(2, 5*time.Second)
	pol.Backoff.Jitter = &policy.Jitter{Mode: policy.JitterProportional, MinPercent: i32p(80), MaxPercent: i32p(120)}
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	p := newPipeline(t, "jitter-tiers", 2, pol, func(r *dt.Request) dt.Response {
		if r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	}, dt.WithClock(fc))
	p.cfg.Delivery.MaxInFlight = 100
	// A seeded source: the 1,000 draws, and so the KS test's verdict, are the same on every run.
	start(t, dispatcher.Options{Config: p.cfg, Clock: fc, Rand: rand.New(rand.NewSource(13))})
	failedAt := fc.Now() // the clock stands still until the test steps it
	recs := make([]string, n)
	for i := range recs {
		recs[i] = "r" + strconv.Itoa(i)
	}
	produceKeys(t, p, recs)

	tier := dt.ReadTopic(t, p.c, p.cfg.Topics.Retries[0].Name, n, 60*time.Second)
	if len(tier) != n {
		t.Fatalf("%d retry records, want %d", len(tier), n)
	}
	due := make(map[string]time.Time, n)
	delays := make([]float64, 0, n)
	for _, r := range tier {
		v, _ := dt.Header(r, headers.Due)
		at, err := headers.ParseTime(v)
		if err != nil {
			t.Fatalf("%s: due %q: %v", r.Value, v, err)
		}
		d := at.Sub(failedAt)
		if d < 4*time.Second || d > 6*time.Second {
			t.Errorf("%s: due %v after its failure, outside the jitter window [4s, 6s]", r.Value, d)
		}
		due[string(r.Value)] = at
		delays = append(delays, d.Seconds())
	}
	slices.Sort(delays)
	dec := make([]string, 0, 10)
	for q := 1; q <= 10; q++ {
		dec = append(dec, strconv.FormatFloat(delays[min(q*len(delays)/10, len(delays)-1)], 'f', 3, 64))
	}
	d, pv := dt.KSUniform(delays, 4, 6)
	t.Logf("due times after the failure (deciles, s): %v; KS D = %.4f, p = %.3g", dec, d, pv)
	if pv <= 0.01 {
		t.Errorf("the due times are not distributed as the policy's jitter: KS p = %.3g (D = %.4f)", pv, d)
	}

	retried := func() []*dt.Request {
		var out []*dt.Request
		for _, r := range p.sink.Requests() {
			if r.Attempt == 2 {
				out = append(out, r)
			}
		}
		return out
	}
	for now := failedAt.Add(4*time.Second - step); !now.After(failedAt.Add(6 * time.Second)); now = now.Add(step) {
		fc.SetTime(now)
		want := 0
		for _, at := range due {
			if !at.After(now) {
				want++
			}
		}
		dt.Eventually(t, 20*time.Second, func() bool { return len(retried()) >= want },
			"the %d retries due by %v delivered once the clock reached it", want, now.Sub(failedAt))
		for _, r := range retried() {
			if at := due[string(r.Body)]; at.After(now) {
				t.Fatalf("%s delivered at %v, before its due time %v", r.Body, now.Sub(failedAt), at.Sub(failedAt))
			}
		}
	}
	if got := len(retried()); got != n {
		t.Errorf("%d records retried, want %d", got, n)
	}
}

// TestRetryAfterDoesNotHoldUpItsTier: a record whose sink asks for Retry-After 4 s, far longer than
// its tier's 50 ms, goes to the tier whose delay covers it (the last one here), so the records
// failing after it are retried once the engine's clock reaches their own 50 ms, not its 4 s.
func TestRetryAfterDoesNotHoldUpItsTier(t *testing.T) {
	pol := simplePolicy(3, 50*time.Millisecond)
	pol.Backoff.MaxDelay = dt.D(100 * time.Millisecond)
	pol.RetryAfter = &policy.RetryAfter{Mode: policy.RetryAfterHonor, MaxDelay: dt.PD(4 * time.Second)}
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	p := newPipeline(t, "retry-after-tier", 1, pol, func(r *dt.Request) dt.Response {
		switch {
		case string(r.Body) == "slow" && r.Attempt == 1:
			return dt.Response{Status: 503, RetryAfter: "4"}
		case r.Attempt == 1:
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	}, dt.WithClock(fc))
	p.cfg.Delivery.Ordering = config.OrderingUnordered
	start(t, dispatcher.Options{Config: p.cfg, Clock: fc})
	failedAt := fc.Now()
	keys := []string{"slow", "a", "b", "c"}
	produceKeys(t, p, keys)
	retried := func(reqs []*dt.Request) map[string]*dt.Request {
		out := map[string]*dt.Request{}
		for _, r := range reqs {
			if r.Attempt == 2 {
				out[string(r.Body)] = r
			}
		}
		return out
	}
	// The clock moves only once every failure is decided and written at failedAt.
	tiers := p.cfg.Topics.Retries.Names()
	dt.Eventually(t, 20*time.Second, func() bool {
		return endOffset(t, p, tiers[0], 0) == 3 && endOffset(t, p, tiers[len(tiers)-1], 0) == 1
	}, "a, b and c written to the first tier, slow to the last")

	fc.SetTime(failedAt.Add(50 * time.Millisecond))
	p.sink.WaitFor(t, 20*time.Second, func(reqs []*dt.Request) bool { return len(retried(reqs)) == 3 },
		"a, b and c retried once the clock reached their 50ms backoff")
	if r, ok := retried(p.sink.Requests())["slow"]; ok {
		t.Fatalf("slow retried from %s after 50ms, before its Retry-After of 4s", r.DeliveredFrom)
	}

	fc.SetTime(failedAt.Add(4*time.Second - time.Millisecond))
	fc.SetTime(failedAt.Add(4 * time.Second))

	p.sink.WaitFor(t, 20*time.Second, func(reqs []*dt.Request) bool { return len(retried(reqs)) == 4 }, "slow retried after 4s")
	for key, r := range retried(p.sink.Requests()) {
		d := r.At.Sub(failedAt)
		t.Logf("%s: retried after %v from %s", key, d, r.DeliveredFrom)
		if key != "slow" && d < 50*time.Millisecond {
			t.Errorf("%s: retried after %v, before its 50ms backoff", key, d)
		}
		if key == "slow" {
			if d < 4*time.Second {
				t.Errorf("slow: retried after %v, before its Retry-After of 4s", d)
			}
			if want := p.cfg.Topics.Retries[len(p.cfg.Topics.Retries)-1].Name; !hasPrefix(r.DeliveredFrom, want+"/") {
				t.Errorf("slow: retried from %s, want the tier whose delay covers 4s, %s", r.DeliveredFrom, want)
			}
		}
	}
	if n := endOffset(t, p, p.cfg.Topics.DeadLetter, 0); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// produceKeys writes one record per key to the pipeline's source topic, with the key as its value.
func produceKeys(t *testing.T, p *pipeline, keys []string) {
	t.Helper()
	rs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		rs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(k), Value: []byte(k)}
	}
	dt.Produce(t, p.prod, rs...)
}
