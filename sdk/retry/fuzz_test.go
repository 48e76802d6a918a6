package retry_test

import (
	"errors"
	"math/big"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

var jitterModes = []retry.JitterMode{"", retry.JitterNone, retry.JitterAdditive, retry.JitterProportional, retry.JitterFull, "Bogus"}
var capPlacements = []retry.CapPlacement{"", retry.CapAfterJitter, retry.CapBeforeJitter, "Bogus"}

// refBounds is an independent reference for a window: the formulas of the design applied to the raw
// delay raw = InitialDelay * Multiplier^(n-1), computed with exact rationals (never clamped) and
// floored to nanoseconds.
func refBounds(b retry.Backoff, raw *big.Rat) (nominal, earliest, latest *big.Int) {
	mode := b.Jitter.Mode
	capR := new(big.Rat).SetInt64(int64(b.MaxDelay))
	minR := func(x, y *big.Rat) *big.Rat {
		if x.Cmp(y) < 0 {
			return x
		}
		return y
	}
	pct := func(x *big.Rat, p int32) *big.Rat { return new(big.Rat).Mul(x, big.NewRat(int64(p), 100)) }
	floor := func(x *big.Rat) *big.Int { return new(big.Int).Quo(x.Num(), x.Denom()) }
	capped := minR(raw, capR)
	jmax := new(big.Rat).SetInt64(int64(b.Jitter.Max))
	after := b.Cap != retry.CapBeforeJitter
	var lo, hi *big.Rat
	switch mode {
	case retry.JitterAdditive:
		if after {
			lo, hi = capped, minR(new(big.Rat).Add(raw, jmax), capR)
		} else {
			lo, hi = capped, new(big.Rat).Add(capped, jmax)
		}
	case retry.JitterProportional:
		if after {
			lo, hi = minR(pct(raw, b.Jitter.MinPercent), capR), minR(pct(raw, b.Jitter.MaxPercent), capR)
		} else {
			lo, hi = pct(capped, b.Jitter.MinPercent), pct(capped, b.Jitter.MaxPercent)
		}
	case retry.JitterFull:
		lo, hi = new(big.Rat), capped
	default:
		lo, hi = capped, capped
	}
	return floor(capped), floor(lo), floor(hi)
}

func FuzzPlan(f *testing.F) {
	// attempts, initial, multiplier, maxDelay, mode, jitterMax, minPct, maxPct, cap, timeout, deadline, seed
	f.Add(int32(6), int64(2*time.Second), "2", int64(300*time.Second), uint8(2), int64(time.Second), int32(0), int32(0), uint8(1), int64(0), int64(0), int64(1))
	f.Add(int32(4), int64(2*time.Second), "2", int64(300*time.Second), uint8(3), int64(0), int32(80), int32(120), uint8(2), int64(30*time.Second), int64(20*time.Minute), int64(2))
	f.Add(int32(4), int64(time.Second), "2", int64(10*time.Second), uint8(3), int64(0), int32(80), int32(120), uint8(1), int64(0), int64(0), int64(3))
	f.Add(int32(5), int64(10*time.Minute), "2", int64(time.Hour), uint8(1), int64(0), int32(0), int32(0), uint8(0), int64(0), int64(0), int64(4))
	f.Add(int32(3), int64(time.Second), "2", int64(10*time.Second), uint8(3), int64(0), int32(50), int32(150), uint8(2), int64(0), int64(0), int64(5))
	f.Add(int32(100), int64(time.Second), "10", int64(time.Hour), uint8(3), int64(0), int32(0), int32(1000), uint8(1), int64(0), int64(0), int64(6))
	f.Add(int32(100), int64(1), "9999.999999", int64(time.Hour), uint8(4), int64(0), int32(0), int32(0), uint8(2), int64(0), int64(0), int64(7))
	f.Add(int32(7), int64(3), "1.7", int64(1000), uint8(2), int64(7), int32(0), int32(0), uint8(2), int64(-1), int64(5), int64(8))
	f.Add(int32(0), int64(-1), "1e9", int64(-5), uint8(5), int64(-1), int32(-1), int32(2000), uint8(3), int64(0), int64(0), int64(9))
	f.Fuzz(func(t *testing.T, attempts int32, initial int64, multiplier string, maxDelay int64, mode uint8,
		jitterMax int64, minPct, maxPct int32, capPl uint8, timeout, deadline, seed int64) {
		p := retry.Policy{
			MaxAttempts: attempts,
			Backoff: retry.Backoff{
				InitialDelay: time.Duration(initial),
				Multiplier:   multiplier,
				MaxDelay:     time.Duration(maxDelay),
				Jitter: retry.Jitter{
					Mode: jitterModes[int(mode)%len(jitterModes)], Max: time.Duration(jitterMax),
					MinPercent: minPct, MaxPercent: maxPct,
				},
				Cap: capPlacements[int(capPl)%len(capPlacements)],
			},
			AttemptTimeout: time.Duration(timeout),
			Deadline:       time.Duration(deadline),
		}
		c, err := retry.Compile(p)
		if err != nil {
			var verr *retry.ValidationError
			if !errors.As(err, &verr) || len(verr.Errors) == 0 || err.Error() == "" {
				t.Fatalf("Compile error %T %v is not a non-empty *ValidationError", err, err)
			}
			return
		}
		plan := c.Plan()
		if len(plan.Schedule) != int(attempts)-1 || plan.MaxAttempts != attempts {
			t.Fatalf("%d retries for %d attempts", len(plan.Schedule), attempts)
		}
		rng := newSeededRand(seed)
		mult, _ := new(big.Rat).SetString(multiplier)
		raw := new(big.Rat).SetInt64(initial)
		var sumE, sumL time.Duration
		prev := time.Duration(0)
		for i, st := range plan.Schedule {
			n := int32(i + 1)
			if st.Attempt != n+1 || st.Tier != n {
				t.Fatalf("retry %d: attempt %d tier %d", n, st.Attempt, st.Tier)
			}
			if st.Earliest < 0 || st.Earliest > st.Nominal || st.Nominal > st.Latest || st.Nominal > p.Backoff.MaxDelay || st.Nominal < prev {
				t.Fatalf("retry %d: window %+v out of order (max delay %v, previous nominal %v)", n, st.Window, p.Backoff.MaxDelay, prev)
			}
			prev = st.Nominal
			if n > 1 {
				raw.Mul(raw, mult)
			}
			nom, lo, hi := refBounds(p.Backoff, raw)
			if nom.Int64() != int64(st.Nominal) || lo.Int64() != int64(st.Earliest) || hi.Int64() != int64(st.Latest) {
				t.Fatalf("retry %d: window %+v, reference nominal %v earliest %v latest %v", n, st.Window, nom, lo, hi)
			}
			if w, ok := c.Window(n); !ok || w != st.Window {
				t.Fatalf("Window(%d) = %+v, %v; plan has %+v", n, w, ok, st.Window)
			}
			for range 8 {
				d, ok := c.Sample(n, rng)
				if !ok || d < st.Earliest || d > st.Latest {
					t.Fatalf("retry %d: sample %v (ok %v) outside %+v", n, d, ok, st.Window)
				}
			}
			for _, r := range []retry.Rand{lowRand, highRand} {
				d, _ := c.Sample(n, r)
				if d < st.Earliest || d > st.Latest {
					t.Fatalf("retry %d: extreme sample %v outside %+v", n, d, st.Window)
				}
			}
			sumE += st.Earliest
			sumL += st.Latest
		}
		if plan.TotalDelay != (retry.Range{Earliest: sumE, Latest: sumL}) || sumL > retry.MaxTotalDelay {
			t.Fatalf("total %+v, sums %v..%v", plan.TotalDelay, sumE, sumL)
		}
		if plan.BestCase > plan.WorstCase || plan.BestCase > sumE || plan.WorstCase < 0 {
			t.Fatalf("best %v worst %v for totals %v..%v", plan.BestCase, plan.WorstCase, sumE, sumL)
		}
		if deadline > 0 && plan.WorstCase > time.Duration(deadline) {
			t.Fatalf("worst case %v past the deadline %v", plan.WorstCase, time.Duration(deadline))
		}
		if tiers := plan.Tiers(false); len(tiers) != len(plan.Schedule) {
			t.Fatalf("%d unshared tiers for %d retries", len(tiers), len(plan.Schedule))
		}
		next := int32(2)
		for i, tier := range plan.Tiers(true) {
			if tier.Index != int32(i+1) || len(tier.Attempts) == 0 {
				t.Fatalf("tier %d: %+v", i, tier)
			}
			for _, a := range tier.Attempts {
				w, _ := c.Window(a - 1)
				if a != next || w.Earliest != tier.Earliest || w.Latest != tier.Latest || w.Nominal != tier.Nominal {
					t.Fatalf("tier %+v: attempt %d (want %d) has window %+v", tier, a, next, w)
				}
				next++
			}
		}
		if next != attempts+1 {
			t.Fatalf("shared tiers cover attempts up to %d, want %d", next-1, attempts)
		}
		for _, n := range []int32{0, attempts, -attempts} {
			if _, ok := c.Window(n); ok {
				t.Fatalf("Window(%d) ok for %d attempts", n, attempts)
			}
		}
	})
}

var statusSpec = regexp.MustCompile(`^([1-5][0-9][0-9])(?:-([1-5][0-9][0-9]))?$`)

// refStatus is an independent reference for an HTTP status entry.
func refStatus(spec string) (lo, hi int, ok bool) {
	m := statusSpec.FindStringSubmatch(spec)
	if m == nil {
		return 0, 0, false
	}
	lo, _ = strconv.Atoi(m[1])
	hi = lo
	if m[2] != "" {
		hi, _ = strconv.Atoi(m[2])
	}
	return lo, hi, lo <= hi
}

func FuzzClassify(f *testing.F) {
	// status, errorType, message, transport, rule status, rule error type, rule pattern, attempt, retryAfter, age
	f.Add(503, "", "", "", "500-599", "TimeoutError", "(?i)timeout", int32(1), int64(0), int64(0))
	f.Add(0, "Error", "connect ECONNREFUSED", "", "429", "Throttling", "(?i)econnrefused", int32(2), int64(0), int64(time.Minute))
	f.Add(0, "ValidationError", "bad", "timeout", "408", "ConnectionError", `\b50[0-4]\b`, int32(5), int64(time.Hour), int64(19*time.Minute))
	f.Add(404, "NotFound", "", "dns", "599-500", "", "(?i", int32(6), int64(-1), int64(-time.Hour))
	f.Add(-1, "\xff", "\x00", "bogus", "", "", "", int32(-3), int64(1), int64(1<<62))
	f.Add(0, "", "\u212aAFKA down", "", "500", "X", "(?i)kafka", int32(1), int64(0), int64(0))
	f.Add(0, "", "\xe2NET\xff", "reset", "500", "X", "(?i)net", int32(1), int64(0), int64(0))
	f.Add(0, "", "rate.limit(5)", "", "500", "X", `\Qrate.limit(5)\E`, int32(1), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, status int, errorType, message, transport, ruleStatus, ruleType, rulePattern string,
		attempt int32, retryAfter, age int64) {
		p := designPolicy()
		fuzzRule := retry.Rule{Name: "fuzz", Action: retry.ActionRetry, MaxAttempts: 4,
			HTTPStatuses: []string{ruleStatus}, ErrorTypes: []string{ruleType}, MessagePatterns: []string{rulePattern}}
		p.Classification.Rules = append([]retry.Rule{fuzzRule}, p.Classification.Rules...)

		lo, hi, statusOK := refStatus(ruleStatus)
		re, reErr := regexp.Compile(rulePattern)
		wantFields := map[string]bool{}
		if !statusOK {
			wantFields["classification.rules[0].httpStatuses[0]"] = true
		}
		if ruleType == "" {
			wantFields["classification.rules[0].errorTypes[0]"] = true
		}
		if _, budgetErr := retry.CheckPattern(rulePattern); reErr != nil || budgetErr != nil {
			wantFields["classification.rules[0].messagePatterns[0]"] = true
		}
		c, err := retry.Compile(p)
		if err != nil {
			var verr *retry.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Compile error %T %v is not a *ValidationError", err, err)
			}
			for _, fe := range verr.Errors {
				if !wantFields[fe.Field] {
					t.Fatalf("unexpected field error %v", fe)
				}
				if fe.Rule != "fuzz" {
					t.Fatalf("field error %v does not name the rule", fe)
				}
				delete(wantFields, fe.Field)
			}
		}
		if len(wantFields) > 0 {
			t.Fatalf("Compile missed %v (error %v)", wantFields, err)
		}
		if err != nil {
			return
		}

		o := retry.Outcome{HTTPStatus: status, ErrorType: errorType, Message: message,
			Transport: retry.TransportError(transport), RetryAfter: time.Duration(retryAfter)}
		effStatus, effType := status, errorType
		if transport != "" {
			effStatus, effType = 0, "ConnectionError"
			if transport == "timeout" {
				effType = "TimeoutError"
			}
		}
		got := c.Classify(o)
		wantFuzz := (effStatus >= lo && effStatus <= hi) || effType == ruleType || re.MatchString(message)
		if (got.Rule == "fuzz") != wantFuzz {
			t.Fatalf("Classify(%+v) = %+v; the fuzz rule should match: %v", o, got, wantFuzz)
		}
		if got.ErrorType != effType {
			t.Fatalf("Classify(%+v) error type %q, want %q", o, got.ErrorType, effType)
		}
		switch got.Action {
		case retry.ActionRetry, retry.ActionDeadLetter, retry.ActionDrop:
		default:
			t.Fatalf("Classify(%+v) action %q", o, got.Action)
		}

		recordTime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		now := recordTime.Add(time.Duration(age))
		d := c.Decide(o, attempt, recordTime, now, newSeededRand(int64(attempt)))
		if d.Rule != got.Rule || d.MaxAttempts != got.MaxAttempts {
			t.Fatalf("Decide %+v disagrees with Classify %+v", d, got)
		}
		switch d.Action {
		case retry.ActionRetry:
			if d.Reason != "" || d.Delay < 0 || !d.Due.Equal(now.Add(d.Delay)) || attempt >= got.MaxAttempts || got.Action != retry.ActionRetry {
				t.Fatalf("bad retry decision %+v for attempt %d", d, attempt)
			}
			if dl, ok := c.DeadlineOf(recordTime); ok && d.Due.After(dl) {
				t.Fatalf("retry %+v due after the deadline %v", d, dl)
			}
			if !d.FromRetryAfter {
				w, _ := c.Window(max(attempt, 1))
				if d.Delay < w.Earliest || d.Delay > w.Latest {
					t.Fatalf("retry delay %v outside %+v", d.Delay, w)
				}
			} else if d.Delay > 5*time.Minute {
				t.Fatalf("Retry-After delay %v above its cap", d.Delay)
			}
		case retry.ActionDeadLetter:
			if d.Reason == "" || d.Delay != 0 || !d.Due.IsZero() {
				t.Fatalf("bad dead-letter decision %+v", d)
			}
		case retry.ActionDrop:
			if d.Reason != "" {
				t.Fatalf("bad drop decision %+v", d)
			}
		default:
			t.Fatalf("Decide action %q", d.Action)
		}
	})
}
