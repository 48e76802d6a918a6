package dispatcher

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
)

// randomDelay is a delay from 0 to about 40 days, most of them short, some at the extremes.
func randomDelay(r *rand.Rand) time.Duration {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return time.Duration(r.Int64N(int64(time.Second)))
	case 2:
		return time.Duration(r.Int64N(int64(time.Hour)))
	case 3:
		return time.Duration(r.Int64N(int64(40 * 24 * time.Hour)))
	default:
		return time.Duration(r.Int64N(int64(10 * time.Minute)))
	}
}

// randomPolicy is a random policy the API accepts (retry.Compile's checks, the API's bounds): any
// backoff, jitter, cap, deadline and Retry-After handling, with every failure retried.
func randomPolicy(r *rand.Rand) *policy.Spec {
	for {
		init := randomDelay(r)
		maxDelay := init + randomDelay(r)
		p := &policy.Spec{
			MaxAttempts: 2 + r.Int32N(99),
			Backoff: policy.Backoff{InitialDelay: policy.D(init), MaxDelay: policy.D(maxDelay),
				Multiplier: []string{"1", "1.5", "2", "10", "9999"}[r.IntN(5)]},
			Classification: &policy.Classification{DefaultAction: "Retry"},
		}
		if r.IntN(2) == 0 {
			p.Backoff.Cap = policy.CapBeforeJitter
		}
		switch r.IntN(4) {
		case 1:
			p.Backoff.Jitter = &policy.Jitter{Mode: policy.JitterAdditive, Max: policy.PD(randomDelay(r))}
		case 2:
			lo, hi := r.Int32N(101), 100+r.Int32N(901)
			p.Backoff.Jitter = &policy.Jitter{Mode: policy.JitterProportional, MinPercent: &lo, MaxPercent: &hi}
		case 3:
			p.Backoff.Jitter = &policy.Jitter{Mode: policy.JitterFull}
		}
		switch r.IntN(3) {
		case 1:
			p.RetryAfter = &policy.RetryAfter{Mode: policy.RetryAfterIgnore}
		case 2:
			// No upper bound in the API: a year, a century, the longest duration there is.
			ra := []time.Duration{randomDelay(r), 365 * 24 * time.Hour, 100 * 365 * 24 * time.Hour, 1<<63 - 1}[r.IntN(4)]
			p.RetryAfter = &policy.RetryAfter{Mode: policy.RetryAfterHonor, MaxDelay: policy.PD(ra)}
		}
		if r.IntN(3) == 0 {
			p.Deadline = policy.PD(init + randomDelay(r))
		}
		if _, err := retry.Compile(policy.FromSpec(*p)); err == nil {
			return p
		}
	}
}

// testSettings are the settings of a dispatcher running pol, with draining the tiers of an
// earlier policy it no longer has.
func testSettings(t *testing.T, pol *policy.Spec, draining []string) (settings, *retry.Compiled, *config.Config) {
	t.Helper()
	cfg := dispatchertest.Config(nil, "due-bound", "orders", "orders.dlq", pol, "")
	for _, n := range draining {
		if !contains(cfg.Topics.Retries.Names(), n) {
			cfg.Topics.Draining = append(cfg.Topics.Draining, n)
		}
	}
	c, err := cfg.Compile()
	if err != nil {
		t.Fatalf("compile %+v: %v", pol, err)
	}
	s, err := newSettings(cfg, c)
	if err != nil {
		t.Fatalf("settings: %v", err)
	}
	return s, c, cfg
}

func contains(names []string, n string) bool {
	for _, m := range names {
		if m == n {
			return true
		}
	}
	return false
}

// scheduled is the retry record A's dispatcher writes after delivery attempt of a source record
// failed at now with a Retry-After of ra (0: none): as its engine decides and writes it.
func scheduled(r *rand.Rand, s settings, pol *retry.Compiled, attempt int32, ra time.Duration, now time.Time) (*kgo.Record, bool) {
	e := &Engine{settings: s, pol: pol, rng: &lockedRand{r: pcg{rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))}}}
	src := &kgo.Record{Topic: "orders", Partition: 0, Offset: r.Int64N(1 << 40), Key: []byte("k"), Value: []byte("v"), Timestamp: now}
	it := newItem(src, &partState{tier: 0}, &e.settings, now)
	it.attempt = attempt
	o := retry.Outcome{HTTPStatus: 503, RetryAfter: ra}
	dec := e.decide(it, Result{Outcome: o}, now)
	if dec.Action != retry.ActionRetry {
		return nil, false // past the deadline: dead-lettered, nothing waits
	}
	tier := e.retryTier(attempt+1, dec.Delay, dec.FromRetryAfter)
	f := &failure{at: now, errorType: "HTTP503", message: "busy", httpStatus: 503}
	return it.retryRecord(e.tierNames[tier], e.pipelineID, f, dec.Due), true
}

// TestAnyPolicysRetryIsReadByAnyOther: for any two policies A and B the API accepts, a retry A's
// dispatcher scheduled (its due time as A computes it, Retry-After of any length included) and a
// dispatcher running B reads at once, or with its clock up to a minute behind, is delivered at that
// due time: never dead-lettered as malformed (a record that already had B's maxAttempts deliveries
// is max_retries_exceeded, as documented). A due time no policy can give (more than the longest
// honoured Retry-After plus the skew ahead, before 1970) is malformed.
func TestAnyPolicysRetryIsReadByAnyOther(t *testing.T) {
	r := rand.New(rand.NewPCG(39, 1))
	failures := 0
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf(format, args...)
		if failures++; failures == 5 {
			t.FailNow()
		}
	}
	for i := range 400 {
		pa, pb := randomPolicy(r), randomPolicy(r)
		sa, ca, cfgA := testSettings(t, pa, nil)
		sb, _, _ := testSettings(t, pb, cfgA.Topics.Retries.Names())
		written := time.Now().Add(time.Duration(r.Int64N(int64(24 * time.Hour))))
		attempt := 1 + r.Int32N(ca.MaxAttempts()-1)
		ra := []time.Duration{0, randomDelay(r), 1<<63 - 1, 365 * 24 * time.Hour}[r.IntN(4)]
		rec, ok := scheduled(r, sa, ca, attempt, ra, written)
		if !ok {
			continue
		}
		dueRaw, _ := header(rec, headers.Due)
		due, _ := headers.ParseTime(dueRaw)
		read := written.Add(-time.Duration(r.Int64N(int64(59 * time.Second))))
		if r.IntN(2) == 0 {
			read = written.Add(time.Duration(r.Int64N(int64(time.Hour))))
		}
		tier, ok := sb.topicTier[rec.Topic]
		if !ok {
			t.Fatalf("B does not consume A's tier %s", rec.Topic)
		}
		it := newItem(rec, &partState{tier: tier}, &sb, read)
		if it.pre != nil && it.pre.reason == headers.ReasonMaxRetriesExceeded && attempt >= sb.maxAttempts() {
			continue
		}
		if it.pre != nil || !it.due.Equal(due) || it.attempt != attempt+1 {
			fail("case %d: A %s\nB %s\nattempt %d, Retry-After %v: due %s (in %v) read at %v in B's tier %d: refused %+v, due %v, attempt %d",
				i, spec(pa), spec(pb), attempt, ra, dueRaw, due.Sub(written), read.Sub(written), tier, it.pre, it.due, it.attempt)
		}

		// Beyond the reach of any policy (an honoured Retry-After waits at most a year, a backoff
		// delay at most the 30 days of a whole plan): refused, whatever B is.
		for _, bad := range []time.Time{
			read.Add(365*24*time.Hour + time.Minute + time.Millisecond),
			read.AddDate(1000, 0, 0),
			time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
			time.UnixMilli(-1),
			time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		} {
			hostile := setHeader(rec, headers.Due, headers.FormatTime(bad))
			it := newItem(hostile, &partState{tier: tier}, &sb, read)
			if it.pre == nil || it.pre.reason != headers.ReasonMalformed {
				fail("case %d: due %s read at %s accepted (%+v)", i, headers.FormatTime(bad), headers.FormatTime(read), it.pre)
			}
		}
	}
}

// pcg is a seeded math/rand/v2 source as the retry core's Rand.
type pcg struct{ *rand.Rand }

func (p pcg) Int63n(n int64) int64 { return p.Int64N(n) }

func header(r *kgo.Record, k string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value), true
		}
	}
	return "", false
}

// setHeader is a copy of r with header k set to v.
func setHeader(r *kgo.Record, k, v string) *kgo.Record {
	c := *r
	c.Headers = make([]kgo.RecordHeader, 0, len(r.Headers))
	for _, h := range r.Headers {
		if h.Key == k {
			h.Value = []byte(v)
		}
		c.Headers = append(c.Headers, h)
	}
	return &c
}

// spec describes a policy for a failure message.
func spec(p *policy.Spec) string {
	s := "maxAttempts " + strconv.Itoa(int(p.MaxAttempts)) + " initial " + p.Backoff.InitialDelay.String() + " x" +
		p.Backoff.Multiplier + " max " + p.Backoff.MaxDelay.String() + " cap " + string(p.Backoff.Cap)
	if j := p.Backoff.Jitter; j != nil {
		s += " jitter " + string(j.Mode)
		if j.Max != nil {
			s += " " + j.Max.String()
		}
		if j.MinPercent != nil {
			s += " " + strconv.Itoa(int(*j.MinPercent)) + "-" + strconv.Itoa(int(*j.MaxPercent)) + "%"
		}
	}
	if p.RetryAfter != nil {
		s += " retryAfter " + string(p.RetryAfter.Mode)
		if p.RetryAfter.MaxDelay != nil {
			s += " " + p.RetryAfter.MaxDelay.String()
		}
	}
	if p.Deadline != nil {
		s += " deadline " + p.Deadline.String()
	}
	return s
}
