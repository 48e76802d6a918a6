package retry_test

import (
	"math"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

// fixedRand always draws the same end of the range: low draws 0, high draws n-1.
type fixedRand struct{ high bool }

func (f fixedRand) Int63n(n int64) int64 {
	if f.high {
		return n - 1
	}
	return 0
}

var (
	lowRand  = fixedRand{}
	highRand = fixedRand{high: true}
)

func policyWith(b retry.Backoff, attempts int32) retry.Policy {
	return retry.Policy{MaxAttempts: attempts, Backoff: b}
}

func TestCapPlacementWindows(t *testing.T) {
	s := time.Second
	tests := []struct {
		name    string
		backoff retry.Backoff
		retry   int32
		want    retry.Window
	}{
		{
			name:    "additive jitter on a delay at the cap never exceeds the cap when capped after the jitter",
			backoff: retry.Backoff{InitialDelay: 300 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: s}, Cap: retry.CapAfterJitter},
			retry:   1,
			want:    retry.Window{Attempt: 2, Nominal: 300 * s, Earliest: 300 * s, Latest: 300 * s},
		},
		{
			name:    "additive jitter on a delay at the cap spreads above it when capped before the jitter",
			backoff: retry.Backoff{InitialDelay: 300 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: s}, Cap: retry.CapBeforeJitter},
			retry:   1,
			want:    retry.Window{Attempt: 2, Nominal: 300 * s, Earliest: 300 * s, Latest: 301 * s},
		},
		{
			name:    "additive jitter on a delay just below the cap is cut at the cap when capped after the jitter",
			backoff: retry.Backoff{InitialDelay: 299500 * ms, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: s}},
			retry:   1,
			want:    retry.Window{Attempt: 2, Nominal: 299500 * ms, Earliest: 299500 * ms, Latest: 300 * s},
		},
		{
			name:    "additive jitter on a raw delay past the cap stays at the cap when capped after the jitter",
			backoff: retry.Backoff{InitialDelay: 200 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: s}},
			retry:   2,
			want:    retry.Window{Attempt: 3, Nominal: 300 * s, Earliest: 300 * s, Latest: 300 * s},
		},
		{
			name:    "proportional jitter on a raw delay past the cap spreads around the cap when capped before the jitter",
			backoff: retry.Backoff{InitialDelay: 200 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterProportional, MinPercent: 80, MaxPercent: 120}, Cap: retry.CapBeforeJitter},
			retry:   2,
			want:    retry.Window{Attempt: 3, Nominal: 300 * s, Earliest: 240 * s, Latest: 360 * s},
		},
		{
			name:    "proportional jitter on a raw delay past the cap can still fall below the cap when capped after the jitter",
			backoff: retry.Backoff{InitialDelay: 160 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterProportional, MinPercent: 80, MaxPercent: 120}, Cap: retry.CapAfterJitter},
			retry:   2,
			want:    retry.Window{Attempt: 3, Nominal: 300 * s, Earliest: 256 * s, Latest: 300 * s},
		},
		{
			name:    "full jitter draws from zero to the capped delay when capped after the jitter",
			backoff: retry.Backoff{InitialDelay: 200 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterFull}, Cap: retry.CapAfterJitter},
			retry:   2,
			want:    retry.Window{Attempt: 3, Nominal: 300 * s, Earliest: 0, Latest: 300 * s},
		},
		{
			name:    "full jitter draws from zero to the capped delay when capped before the jitter",
			backoff: retry.Backoff{InitialDelay: 200 * s, Multiplier: "2", MaxDelay: 300 * s, Jitter: retry.Jitter{Mode: retry.JitterFull}, Cap: retry.CapBeforeJitter},
			retry:   2,
			want:    retry.Window{Attempt: 3, Nominal: 300 * s, Earliest: 0, Latest: 300 * s},
		},
		{
			name:    "no jitter pins the window to the capped nominal delay",
			backoff: retry.Backoff{InitialDelay: 200 * s, Multiplier: "2", MaxDelay: 300 * s},
			retry:   2,
			want:    retry.Window{Attempt: 3, Nominal: 300 * s, Earliest: 300 * s, Latest: 300 * s},
		},
		{
			name:    "a zero initial delay retries at once",
			backoff: retry.Backoff{InitialDelay: 0, Multiplier: "2", MaxDelay: 0},
			retry:   2,
			want:    retry.Window{Attempt: 3},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, policyWith(tc.backoff, tc.retry+1))
			got, ok := c.Window(tc.retry)
			if !ok || got != tc.want {
				t.Fatalf("Window(%d) = %+v, %v; want %+v", tc.retry, got, ok, tc.want)
			}
			// Sampling with the lowest and the highest draw reaches exactly both ends.
			if d, _ := c.Sample(tc.retry, lowRand); d != tc.want.Earliest {
				t.Errorf("lowest sample %v, want %v", d, tc.want.Earliest)
			}
			if d, _ := c.Sample(tc.retry, highRand); d != tc.want.Latest {
				t.Errorf("highest sample %v, want %v", d, tc.want.Latest)
			}
		})
	}
}

// Capping after the jitter keeps the seed's random variable min(raw + U(0, max), cap): a raw delay
// half a second below the cap with 1s of jitter lands on the cap half of the time. (Resampling or
// drawing uniformly from the window would put almost nothing on the cap.)
func TestSampleKeepsTheCappedRandomVariable(t *testing.T) {
	c := mustCompile(t, policyWith(retry.Backoff{
		InitialDelay: 299500 * ms, Multiplier: "1", MaxDelay: 300 * time.Second,
		Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: time.Second},
	}, 2))
	rng := rand.New(rand.NewSource(7))
	const samples = 10000
	atCap := 0
	for range samples {
		d, _ := c.Sample(1, rng)
		if d == 300*time.Second {
			atCap++
		}
	}
	if frac := float64(atCap) / samples; frac < 0.47 || frac > 0.53 {
		t.Fatalf("%.3f of the samples sit on the cap, want about 0.5", frac)
	}
}

func TestMultipliersAreExact(t *testing.T) {
	s := time.Second
	tests := []struct {
		name       string
		multiplier string
		want       []time.Duration
	}{
		{
			name:       "multiplier 1 gives constant delays",
			multiplier: "1",
			want:       []time.Duration{s, s, s, s, s, s},
		},
		{
			name:       "multiplier 1.5 is exact to the nanosecond",
			multiplier: "1.5",
			want: []time.Duration{1000000000, 1500000000, 2250000000, 3375000000, 5062500000, 7593750000,
				11390625000, 17085937500, 25628906250, 38443359375, 57665039062},
		},
		{
			name:       "multiplier 1.1 does not drift",
			multiplier: "1.1",
			want: []time.Duration{1000000000, 1100000000, 1210000000, 1331000000, 1464100000, 1610510000,
				1771561000, 1948717100, 2143588810, 2357947691, 2593742460},
		},
		{
			// float64: 1e9 * math.Pow(1.7, 2) = 2889999999.9999995, which floors to 2889999999.
			name:       "multiplier 1.7 gives 2.89s where float64 gives 2.889999999s",
			multiplier: "1.7",
			want:       []time.Duration{1000000000, 1700000000, 2890000000, 4913000000},
		},
		{
			name:       "a multiplier with trailing zeros equals the integer",
			multiplier: "2.000",
			want:       []time.Duration{s, 2 * s, 4 * s, 8 * s},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, policyWith(retry.Backoff{InitialDelay: s, Multiplier: tc.multiplier, MaxDelay: time.Hour}, int32(len(tc.want))+1))
			for i, want := range tc.want {
				w, _ := c.Window(int32(i + 1))
				if w.Nominal != want || w.Earliest != want || w.Latest != want {
					t.Errorf("retry %d: %+v, want %v", i+1, w, want)
				}
			}
		})
	}
	if got := time.Duration(1e9 * math.Pow(1.7, 2)); got == 2890000000 { //nolint:staticcheck // QF1005: math.Pow's float64 rounding is what this checks
		t.Fatalf("float64 no longer drifts here (%d); pick another example", got)
	}
}

func TestHugeExponentsSaturateInsteadOfOverflowing(t *testing.T) {
	s := time.Second
	tests := []struct {
		name    string
		backoff retry.Backoff
		last    retry.Window
	}{
		{
			name:    "multiplier 10 over 100 attempts with additive jitter stays at the cap",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "10", MaxDelay: time.Hour, Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: s}},
			last:    retry.Window{Attempt: 100, Nominal: time.Hour, Earliest: time.Hour, Latest: time.Hour},
		},
		{
			name:    "multiplier 10 over 100 attempts with proportional jitter after the cap stays at the cap",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "10", MaxDelay: time.Hour, Jitter: retry.Jitter{Mode: retry.JitterProportional, MinPercent: 1, MaxPercent: 1000}},
			last:    retry.Window{Attempt: 100, Nominal: time.Hour, Earliest: time.Hour, Latest: time.Hour},
		},
		{
			name:    "multiplier 10 over 100 attempts with proportional jitter from zero keeps the whole range below the cap",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "10", MaxDelay: time.Hour, Jitter: retry.Jitter{Mode: retry.JitterProportional, MinPercent: 0, MaxPercent: 100}},
			last:    retry.Window{Attempt: 100, Nominal: time.Hour, Earliest: 0, Latest: time.Hour},
		},
		{
			name:    "multiplier 9999.999999 over 100 attempts with proportional jitter before the cap spreads around the cap",
			backoff: retry.Backoff{InitialDelay: ms, Multiplier: "9999.999999", MaxDelay: time.Hour, Jitter: retry.Jitter{Mode: retry.JitterProportional, MinPercent: 50, MaxPercent: 150}, Cap: retry.CapBeforeJitter},
			last:    retry.Window{Attempt: 100, Nominal: time.Hour, Earliest: 30 * time.Minute, Latest: 90 * time.Minute},
		},
		{
			name:    "multiplier 10 over 100 attempts with full jitter draws below the cap",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "10", MaxDelay: time.Hour, Jitter: retry.Jitter{Mode: retry.JitterFull}},
			last:    retry.Window{Attempt: 100, Nominal: time.Hour, Earliest: 0, Latest: time.Hour},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, policyWith(tc.backoff, retry.MaxAttemptsLimit))
			plan := c.Plan()
			prev := time.Duration(0)
			for _, st := range plan.Schedule {
				if st.Earliest < 0 || st.Earliest > st.Nominal || st.Nominal > st.Latest || st.Nominal < prev {
					t.Fatalf("retry %d: window %+v is not ordered (previous nominal %v)", st.Tier, st.Window, prev)
				}
				prev = st.Nominal
			}
			if got := plan.Schedule[len(plan.Schedule)-1].Window; got != tc.last {
				t.Errorf("last window %+v, want %+v", got, tc.last)
			}
			rng := rand.New(rand.NewSource(1))
			for range 1000 {
				if d, _ := c.Sample(99, rng); d < tc.last.Earliest || d > tc.last.Latest {
					t.Fatalf("sample %v outside %+v", d, tc.last)
				}
			}
		})
	}
}

func TestWindowAndSampleRejectRetriesOutsideThePlan(t *testing.T) {
	c := mustCompile(t, seed000Chatbot())
	for _, n := range []int32{0, -1, 6, math.MaxInt32} {
		if _, ok := c.Window(n); ok {
			t.Errorf("Window(%d) ok, want not ok", n)
		}
		if _, ok := c.Sample(n, lowRand); ok {
			t.Errorf("Sample(%d) ok, want not ok", n)
		}
	}
	one := mustCompile(t, retry.Policy{MaxAttempts: 1, Backoff: retry.Backoff{InitialDelay: time.Second, Multiplier: "2", MaxDelay: time.Second}})
	if plan := one.Plan(); len(plan.Schedule) != 0 || plan.TotalDelay != (retry.Range{}) {
		t.Errorf("a policy with one attempt plans %+v, want no retries", plan)
	}
}

func TestSampleWithoutARandomSourceStaysInTheWindow(t *testing.T) {
	c := mustCompile(t, seed000Chatbot())
	w, _ := c.Window(3)
	for range 1000 {
		if d, _ := c.Sample(3, nil); d < w.Earliest || d > w.Latest {
			t.Fatalf("sample %v outside %+v", d, w)
		}
	}
}

func TestPlanCases(t *testing.T) {
	s := time.Second
	m := time.Minute
	withTimeout := func(p retry.Policy, timeout, deadline time.Duration) retry.Policy {
		p.AttemptTimeout, p.Deadline = timeout, deadline
		return p
	}
	tests := []struct {
		name        string
		policy      retry.Policy
		best, worst time.Duration
	}{
		{
			name:   "without timeout or deadline the worst case is the latest total delay",
			policy: seed000Chatbot(),
			best:   62 * s, worst: 67 * s,
		},
		{
			name:   "every delivery may take the attempt timeout",
			policy: withTimeout(seed000Chatbot(), 30*s, 0),
			best:   62 * s, worst: 67*s + 6*30*s,
		},
		{
			name:   "a deadline longer than the plan does not change it",
			policy: seed001Grading(),
			best:   11200 * ms, worst: 16800*ms + 4*30*s,
		},
		{
			name:   "the deadline caps the worst case",
			policy: withTimeout(seed003DocumentsChunks(), 30*m, 4*time.Hour),
			best:   130 * m, worst: 4 * time.Hour,
		},
		{
			name:   "the deadline caps the best case too",
			policy: withTimeout(seed003DocumentsChunks(), 0, time.Hour),
			best:   time.Hour, worst: time.Hour,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := mustCompile(t, tc.policy).Plan()
			if plan.BestCase != tc.best || plan.WorstCase != tc.worst {
				t.Errorf("best %v worst %v, want %v and %v", plan.BestCase, plan.WorstCase, tc.best, tc.worst)
			}
			if plan.MaxAttempts != tc.policy.MaxAttempts {
				t.Errorf("plan MaxAttempts %d, want %d", plan.MaxAttempts, tc.policy.MaxAttempts)
			}
		})
	}
}

func TestTiers(t *testing.T) {
	s := time.Second
	type tier struct {
		earliest, latest time.Duration
		attempts         []int32
	}
	tests := []struct {
		name    string
		backoff retry.Backoff
		share   bool
		want    []tier
	}{
		{
			name:    "without sharing every retry has its own tier",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "2", MaxDelay: 4 * s},
			want:    []tier{{s, s, []int32{2}}, {2 * s, 2 * s, []int32{3}}, {4 * s, 4 * s, []int32{4}}, {4 * s, 4 * s, []int32{5}}, {4 * s, 4 * s, []int32{6}}},
		},
		{
			name:    "with sharing the retries at the cap share one tier",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "2", MaxDelay: 4 * s},
			share:   true,
			want:    []tier{{s, s, []int32{2}}, {2 * s, 2 * s, []int32{3}}, {4 * s, 4 * s, []int32{4, 5, 6}}},
		},
		{
			name:    "with sharing retries capped after additive jitter share the cap's tier",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "2", MaxDelay: 4 * s, Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: s}},
			share:   true,
			want:    []tier{{s, 2 * s, []int32{2}}, {2 * s, 3 * s, []int32{3}}, {4 * s, 4 * s, []int32{4, 5, 6}}},
		},
		{
			name:    "with sharing retries capped after proportional jitter keep their own tiers until their windows match",
			backoff: retry.Backoff{InitialDelay: s, Multiplier: "2", MaxDelay: 4 * s, Jitter: retry.Jitter{Mode: retry.JitterProportional, MinPercent: 80, MaxPercent: 120}},
			share:   true,
			want: []tier{{800 * ms, 1200 * ms, []int32{2}}, {1600 * ms, 2400 * ms, []int32{3}}, {3200 * ms, 4 * s, []int32{4}},
				{4 * s, 4 * s, []int32{5, 6}}},
		},
		{
			name:    "with sharing a constant delay needs a single tier",
			backoff: retry.Backoff{InitialDelay: 5 * s, Multiplier: "1", MaxDelay: 5 * s},
			share:   true,
			want:    []tier{{5 * s, 5 * s, []int32{2, 3, 4, 5, 6}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tiers := mustCompile(t, policyWith(tc.backoff, 6)).Plan().Tiers(tc.share)
			if len(tiers) != len(tc.want) {
				t.Fatalf("%d tiers %+v, want %d", len(tiers), tiers, len(tc.want))
			}
			for i, got := range tiers {
				w := tc.want[i]
				if got.Index != int32(i+1) || got.Earliest != w.earliest || got.Latest != w.latest || !slices.Equal(got.Attempts, w.attempts) {
					t.Errorf("tier %d = %+v, want index %d window [%v, %v] attempts %v", i, got, i+1, w.earliest, w.latest, w.attempts)
				}
			}
		})
	}
}
