package retry

import (
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// State is a circuit breaker state.
type State string

// The circuit breaker states (seed 001 section 5).
const (
	// StateClosed: requests pass and their outcomes are counted.
	StateClosed State = "Closed"
	// StateOpen: requests are rejected until OpenDuration has elapsed.
	StateOpen State = "Open"
	// StateHalfOpen: at most HalfOpenRequests probes are admitted to test recovery.
	StateHalfOpen State = "HalfOpen"
)

// breakerBuckets is the number of buckets of the sliding window.
const breakerBuckets = 10

type bucket struct {
	epoch     int64 // bucket number since the breaker's origin; valid when used
	used      bool
	successes int64
	failures  int64
}

// BreakerOption configures a Breaker.
type BreakerOption func(*Breaker)

// OnStateChange registers fn to be called once per transition, with the old and the new state. fn is
// called with the breaker's lock held, in transition order: it must be quick and must not call the
// Breaker.
func OnStateChange(fn func(from, to State)) BreakerOption {
	return func(b *Breaker) { b.onChange = fn }
}

// Breaker is a circuit breaker (seed 001 section 5), safe for concurrent use.
//
// Closed: outcomes are counted over a sliding window of Window split into 10 buckets (O(1) memory; an
// outcome leaves the count between 0.9*Window and Window after it was recorded). When the window holds
// at least MinimumRequests outcomes and failures*100 > FailureRatioPercent*requests, the breaker opens.
//
// Open: Allow returns false until OpenDuration has elapsed since opening; then the breaker is
// half-open.
//
// HalfOpen: Allow admits at most HalfOpenRequests probes in all. Any failure reopens the breaker for a
// fresh OpenDuration; once successes*100 > CloseSuccessPercent*HalfOpenRequests it closes with an
// empty window.
//
// Every Allow or Admit that returned true must be followed by exactly one Record, or by one
// Release of its Permit when the request was never made. Outcomes recorded while open (requests admitted before the breaker
// opened) are ignored.
type Breaker struct {
	mu       sync.Mutex
	cfg      CircuitBreakerConfig
	clock    clock.PassiveClock
	onChange func(from, to State)

	state    State
	openedAt time.Time

	origin  time.Time
	width   time.Duration
	last    int64 // highest bucket number seen, so that a clock stepping back never corrupts the ring
	buckets [breakerBuckets]bucket

	probes    int32  // admitted while half-open
	successes int32  // successful probes while half-open
	halfOpens uint64 // times half-open was entered: which half-open state a probe's Permit is of
}

// Permit is a request Admit admitted, for Release to hand back.
type Permit struct {
	probe uint64 // the half-open state (Breaker.halfOpens) it is a probe of; 0: not a probe
}

// NewBreaker returns a closed Breaker reading the time from clk; a nil clk is clock.RealClock. The
// configuration is checked as Compile checks Policy.CircuitBreaker; an invalid one returns a
// *ValidationError.
func NewBreaker(cfg CircuitBreakerConfig, clk clock.PassiveClock, opts ...BreakerOption) (*Breaker, error) {
	if err := ValidateCircuitBreaker(cfg); err != nil {
		return nil, err
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	b := &Breaker{cfg: cfg, clock: clk, state: StateClosed}
	b.origin = clk.Now()
	b.width = max(cfg.Window/breakerBuckets, 1)
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// setState moves to state to and calls the hook; the lock is held.
func (b *Breaker) setState(to State, now time.Time) {
	from := b.state
	b.state = to
	switch to {
	case StateOpen:
		b.openedAt = now
		b.probes, b.successes = 0, 0
	case StateHalfOpen:
		b.probes, b.successes = 0, 0
		b.halfOpens++
	case StateClosed:
		b.buckets = [breakerBuckets]bucket{}
		b.probes, b.successes = 0, 0
	}
	if b.onChange != nil && from != to {
		b.onChange(from, to)
	}
}

// tick applies the time-based transition Open -> HalfOpen; the lock is held.
func (b *Breaker) tick(now time.Time) {
	if b.state == StateOpen && now.Sub(b.openedAt) >= b.cfg.OpenDuration {
		b.setState(StateHalfOpen, now)
	}
}

// Allow reports whether a request may go through now. In the half-open state a true result admits
// one of the HalfOpenRequests probes.
func (b *Breaker) Allow() bool {
	_, ok := b.Admit()
	return ok
}

// Admit is Allow, returning the Permit that Release hands back.
func (b *Breaker) Admit() (Permit, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.tick(now)
	switch b.state {
	case StateClosed:
		return Permit{}, true
	case StateHalfOpen:
		if b.probes < b.cfg.HalfOpenRequests {
			b.probes++
			return Permit{probe: b.halfOpens}, true
		}
	}
	return Permit{}, false
}

// Record records the outcome of a request that Allow admitted.
func (b *Breaker) Record(success bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	b.tick(now)
	switch b.state {
	case StateClosed:
		bk := b.bucketAt(now)
		if success {
			bk.successes++
		} else {
			bk.failures++
		}
		requests, failures := b.counts()
		if requests >= int64(b.cfg.MinimumRequests) && failures*100 > int64(b.cfg.FailureRatioPercent)*requests {
			b.setState(StateOpen, now)
		}
	case StateHalfOpen:
		if !success {
			b.setState(StateOpen, now)
			return
		}
		b.successes++
		if int64(b.successes)*100 > int64(b.cfg.CloseSuccessPercent)*int64(b.cfg.HalfOpenRequests) {
			b.setState(StateClosed, now)
		}
	}
}

// Release hands back the permit of a request that Allow admitted but that was never made (or whose
// outcome says nothing of the sink): it counts as neither a success nor a failure, so it neither
// closes nor opens the breaker. A half-open breaker admits another probe in place of one of its
// own probes; a permit admitted before (while closed, or in an earlier half-open state) frees none.
func (b *Breaker) Release(p Permit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick(b.clock.Now())
	if b.state == StateHalfOpen && p.probe == b.halfOpens && b.probes > b.successes {
		b.probes--
	}
}

// bucketAt returns the bucket for time now, resetting it when it held an older period; the lock is
// held.
func (b *Breaker) bucketAt(now time.Time) *bucket {
	idx := b.epochAt(now)
	bk := &b.buckets[idx%breakerBuckets]
	if !bk.used || bk.epoch != idx {
		*bk = bucket{epoch: idx, used: true}
	}
	return bk
}

func (b *Breaker) epochAt(now time.Time) int64 {
	d := now.Sub(b.origin)
	idx := int64(0)
	if d > 0 {
		idx = int64(d / b.width)
	}
	if idx < b.last {
		idx = b.last
	}
	b.last = idx
	return idx
}

// counts sums the buckets of the current window; the lock is held and bucketAt was just called.
func (b *Breaker) counts() (requests, failures int64) {
	for i := range b.buckets {
		bk := &b.buckets[i]
		if bk.used && b.last-bk.epoch < breakerBuckets {
			requests += bk.successes + bk.failures
			failures += bk.failures
		}
	}
	return requests, failures
}

// State returns the state now; an open breaker whose OpenDuration has elapsed reports (and becomes)
// half-open.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick(b.clock.Now())
	return b.state
}

// OpenUntil returns when an open breaker becomes half-open, so that a consumer can pause until then;
// ok is false when the breaker is not open.
func (b *Breaker) OpenUntil() (t time.Time, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tick(b.clock.Now())
	if b.state != StateOpen {
		return time.Time{}, false
	}
	return b.openedAt.Add(b.cfg.OpenDuration), true
}
