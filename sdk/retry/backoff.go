package retry

import (
	"math"
	"math/big"
	"math/rand/v2"
	"time"
)

// Window is the delay before one retry. Retry n (1-based) is the delay before delivery attempt n+1.
// Every delay the dispatcher can use for this retry lies in [Earliest, Latest], and Earliest <=
// Nominal <= Latest.
type Window struct {
	// Attempt is the delivery attempt this delay precedes: n+1 for retry n (2 for the first retry).
	Attempt int32
	// Nominal is min(InitialDelay * Multiplier^(n-1), MaxDelay), before jitter.
	Nominal time.Duration
	// Earliest is the shortest delay jitter and the cap can produce.
	Earliest time.Duration
	// Latest is the longest delay jitter and the cap can produce.
	Latest time.Duration
}

// step is the precomputed form of one retry's delay: a uniform integer draw from [lo, hi]
// (nanoseconds), then capped at capNs when capAfter is set.
type step struct {
	nominal, lo, hi, capNs int64
	capAfter               bool
	earliest, latest       int64
}

// saturation is the raw delay (in ns) beyond which every derived value saturates: with it, raw,
// raw*p/100 for p >= 1 and raw+jitter all exceed math.MaxInt64. Clamping raw there early keeps the
// exact computation small and never changes a result.
var saturation = new(big.Rat).SetInt(new(big.Int).Mul(big.NewInt(math.MaxInt64), big.NewInt(100)))

// buildSteps computes the windows of retries 1..retries exactly. raw_n = InitialDelay *
// Multiplier^(n-1) is kept as an exact rational (clamped at saturation), and every bound is the floor
// (in ns) of an exact expression.
func buildSteps(b Backoff, mult *big.Rat, retries int) []step {
	if retries <= 0 {
		return nil
	}
	steps := make([]step, retries)
	raw := new(big.Rat).SetInt64(int64(b.InitialDelay))
	capR := new(big.Rat).SetInt64(int64(b.MaxDelay))
	for i := range steps {
		if i > 0 && raw.Cmp(saturation) < 0 {
			raw.Mul(raw, mult)
			if raw.Cmp(saturation) > 0 {
				raw.Set(saturation)
			}
		}
		steps[i] = makeStep(b, raw, capR)
	}
	return steps
}

func makeStep(b Backoff, raw, capR *big.Rat) step {
	capNs := int64(b.MaxDelay)
	rawNs := floorSat(raw)
	s := step{nominal: min(rawNs, capNs), capNs: capNs}
	after := b.Cap != CapBeforeJitter
	switch b.Jitter.Mode {
	case JitterAdditive:
		if after {
			s.lo, s.hi, s.capAfter = rawNs, satAdd64(rawNs, int64(b.Jitter.Max)), true
		} else {
			s.lo, s.hi = s.nominal, satAdd64(s.nominal, int64(b.Jitter.Max))
		}
	case JitterProportional:
		base := raw
		if !after && raw.Cmp(capR) > 0 {
			base = capR
		}
		s.lo = floorSat(percentOf(base, b.Jitter.MinPercent))
		s.hi = floorSat(percentOf(base, b.Jitter.MaxPercent))
		s.capAfter = after
	case JitterFull:
		s.lo, s.hi = 0, s.nominal
	default: // None
		s.lo, s.hi = s.nominal, s.nominal
	}
	s.earliest, s.latest = s.lo, s.hi
	if s.capAfter {
		s.earliest, s.latest = min(s.lo, capNs), min(s.hi, capNs)
	}
	return s
}

func percentOf(r *big.Rat, pct int32) *big.Rat {
	out := new(big.Rat).Mul(r, big.NewRat(int64(pct), 100))
	return out
}

// floorSat returns floor(r) for r >= 0, saturated at math.MaxInt64.
func floorSat(r *big.Rat) int64 {
	q := new(big.Int).Quo(r.Num(), r.Denom())
	if !q.IsInt64() {
		return math.MaxInt64
	}
	return q.Int64()
}

func satAdd64(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satAdd(a, b time.Duration) time.Duration {
	return time.Duration(satAdd64(int64(a), int64(b)))
}

func satMul(d time.Duration, n int64) time.Duration {
	if d <= 0 || n <= 0 {
		return 0
	}
	if int64(d) > math.MaxInt64/n {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

func (s *step) window(n int32) Window {
	return Window{Attempt: n + 1, Nominal: time.Duration(s.nominal), Earliest: time.Duration(s.earliest), Latest: time.Duration(s.latest)}
}

// sample draws from the step's random variable: a uniform integer in [lo, hi], capped after when
// capAfter is set. It never consumes randomness when the window is a single point.
func (s *step) sample(rng Rand) time.Duration {
	if s.earliest == s.latest {
		return time.Duration(s.earliest)
	}
	span := s.hi - s.lo // >= 1
	n := span + 1
	if span == math.MaxInt64 {
		n = span // the one value lost is immaterial
	}
	k := randN(rng, n)
	if k < 0 {
		k = 0
	} else if k > span {
		k = span
	}
	x := s.lo + k
	if s.capAfter && x > s.capNs {
		x = s.capNs
	}
	return time.Duration(x)
}

// randN returns a uniform value in [0, n) from rng, or from math/rand/v2 when rng is nil.
func randN(rng Rand, n int64) int64 {
	if rng == nil {
		return rand.Int64N(n)
	}
	return rng.Int63n(n)
}

// Window returns the delay window of retry n (the delay before delivery attempt n+1), for n in
// 1..MaxAttempts-1; ok is false outside that range.
func (c *Compiled) Window(n int32) (w Window, ok bool) {
	if n < 1 || int(n) > len(c.steps) {
		return Window{}, false
	}
	return c.steps[n-1].window(n), true
}

// Sample draws the delay of retry n from the random variable the policy describes, for example
// min(raw + U(0, Max), MaxDelay) for Additive jitter capped after it. The draw is uniform over the
// whole nanoseconds of the pre-cap range, so every result lies in [Earliest, Latest] of Window(n), and
// a window of one point consumes no randomness. A nil rng uses math/rand/v2. ok is false when n is
// outside 1..MaxAttempts-1. Sample does not allocate.
func (c *Compiled) Sample(n int32, rng Rand) (d time.Duration, ok bool) {
	if n < 1 || int(n) > len(c.steps) {
		return 0, false
	}
	return c.steps[n-1].sample(rng), true
}

// Range is a best and a worst case.
type Range struct {
	// Earliest is the best case.
	Earliest time.Duration
	// Latest is the worst case.
	Latest time.Duration
}

// Step is one retry of a Plan: its window and the retry tier that holds the record while it waits.
type Step struct {
	Window
	// Tier is the retry tier of this retry without tier sharing: n for retry n (topic
	// <source>.retry.<n>). Plan.Tiers(true) gives the shared tiers.
	Tier int32
}

// Plan is the computed schedule of a policy: what the controller shows in status and the dispatcher
// runs. Retry-After responses replace the sampled delay and are not part of the plan.
type Plan struct {
	// MaxAttempts is the policy's number of deliveries in all.
	MaxAttempts int32
	// Schedule has one entry per retry (MaxAttempts-1 entries), in order.
	Schedule []Step
	// TotalDelay is the sum of the windows: the time from the first failure to the last delivery,
	// not counting the deliveries themselves (seed 000: 62s..67s).
	TotalDelay Range
	// BestCase is TotalDelay.Earliest, capped by the deadline when there is one.
	BestCase time.Duration
	// WorstCase is TotalDelay.Latest + MaxAttempts * AttemptTimeout, capped by the deadline when there
	// is one: the longest a record can take from its first delivery to the dead letter queue. An
	// honoured Retry-After (up to RetryAfter.MaxDelay per retry) is not included.
	WorstCase time.Duration
}

// Plan returns the policy's schedule. It allocates a fresh Schedule on each call.
func (c *Compiled) Plan() Plan {
	p := Plan{MaxAttempts: c.policy.MaxAttempts, Schedule: make([]Step, len(c.steps))}
	for i := range c.steps {
		n := int32(i + 1)
		p.Schedule[i] = Step{Window: c.steps[i].window(n), Tier: n}
		p.TotalDelay.Earliest = satAdd(p.TotalDelay.Earliest, p.Schedule[i].Earliest)
		p.TotalDelay.Latest = satAdd(p.TotalDelay.Latest, p.Schedule[i].Latest)
	}
	p.BestCase = p.TotalDelay.Earliest
	p.WorstCase = satAdd(p.TotalDelay.Latest, satMul(c.policy.AttemptTimeout, int64(c.policy.MaxAttempts)))
	if d := c.policy.Deadline; d > 0 {
		p.BestCase = min(p.BestCase, d)
		p.WorstCase = min(p.WorstCase, d)
	}
	return p
}

// Tier is a retry tier: one topic that holds records waiting for retries of one window.
type Tier struct {
	// Index is the 1-based tier number (topic <source>.retry.<Index> with ByAttempt naming).
	Index int32
	// Nominal, Earliest and Latest are the window shared by every retry of the tier.
	Nominal, Earliest, Latest time.Duration
	// Attempts are the delivery attempts (Window.Attempt) whose delay this tier holds, ascending.
	Attempts []int32
}

// Tiers groups the retries into tiers. Without sharing, every retry has its own tier (tier n for
// retry n). With sharing, consecutive retries with identical windows (Nominal, Earliest and Latest
// all equal; for example the repeated retries at the cap) share one tier, as Spring Kafka reuses one
// topic for its max-interval retries. Windows grow with n, so equal windows are always consecutive;
// but two shared tiers can have the same Nominal with different windows (proportional jitter capped
// after it: [3.2s, 4s] then [4s, 4s]), so a topic name built from Nominal alone is not unique.
func (p Plan) Tiers(shareEqualDelays bool) []Tier {
	var tiers []Tier
	for _, s := range p.Schedule {
		if shareEqualDelays && len(tiers) > 0 {
			last := &tiers[len(tiers)-1]
			if last.Nominal == s.Nominal && last.Earliest == s.Earliest && last.Latest == s.Latest {
				last.Attempts = append(last.Attempts, s.Attempt)
				continue
			}
		}
		tiers = append(tiers, Tier{
			Index:    int32(len(tiers) + 1),
			Nominal:  s.Nominal,
			Earliest: s.Earliest,
			Latest:   s.Latest,
			Attempts: []int32{s.Attempt},
		})
	}
	return tiers
}
