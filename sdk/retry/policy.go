package retry

import "time"

// JitterMode is how random jitter is applied to a retry delay.
type JitterMode string

// The jitter modes. The empty string means JitterNone.
const (
	// JitterNone applies no jitter: every delay is its nominal value.
	JitterNone JitterMode = "None"
	// JitterAdditive adds U(0, Jitter.Max) to the raw delay (seed 000: up to 1s).
	JitterAdditive JitterMode = "Additive"
	// JitterProportional multiplies the delay by U(MinPercent, MaxPercent)/100 (seed 001: 80..120).
	JitterProportional JitterMode = "Proportional"
	// JitterFull draws the delay from U(0, min(raw, MaxDelay)) ("full jitter"). The cap placement
	// does not apply to it: the delay is always capped first.
	JitterFull JitterMode = "Full"
)

// CapPlacement says whether Backoff.MaxDelay caps the delay before or after jitter is applied.
type CapPlacement string

// The cap placements. The empty string means CapAfterJitter.
const (
	// CapAfterJitter computes min(raw + jitter, MaxDelay) (or min(raw * factor, MaxDelay)): no delay
	// ever exceeds MaxDelay (seed 000).
	CapAfterJitter CapPlacement = "AfterJitter"
	// CapBeforeJitter computes min(raw, MaxDelay) and then applies jitter, so a capped delay still
	// spreads around MaxDelay (seeds 001 and 004).
	CapBeforeJitter CapPlacement = "BeforeJitter"
)

// Action is what to do with a failed delivery.
type Action string

// The actions.
const (
	// ActionRetry schedules another delivery after the backoff delay.
	ActionRetry Action = "Retry"
	// ActionDeadLetter sends the record to the dead letter queue.
	ActionDeadLetter Action = "DeadLetter"
	// ActionDrop commits the record without retrying or dead-lettering it.
	ActionDrop Action = "Drop"
)

// Reason says why a record was dead-lettered. Its values are the DLQ reasons of the design.
type Reason string

// The dead-letter reasons.
const (
	// ReasonNonRetriable: the outcome was classified DeadLetter.
	ReasonNonRetriable Reason = "non_retriable_error"
	// ReasonMaxRetriesExceeded: the outcome was retriable but the attempts were used up.
	ReasonMaxRetriesExceeded Reason = "max_retries_exceeded"
	// ReasonDeadlineExceeded: the record is past its deadline, or its next retry would fall due after it.
	ReasonDeadlineExceeded Reason = "deadline_exceeded"
	// ReasonUndeliverable: the record could not even be decoded or delivered. This package never
	// returns it; it is defined here so that every DLQ reason has one spelling.
	ReasonUndeliverable Reason = "undeliverable"
)

// Limits on what Compile accepts, so that every plan is bounded.
const (
	// MaxAttemptsLimit is the largest MaxAttempts (policy or rule) Compile accepts.
	MaxAttemptsLimit = 100
	// MaxTotalDelay is the largest latest total delay (the sum of every retry's latest delay) Compile
	// accepts.
	MaxTotalDelay = 30 * 24 * time.Hour
	// MaxMultiplierLength bounds the length of the Backoff.Multiplier string.
	MaxMultiplierLength = 32
	// MaxJitterPercent is the largest Proportional MaxPercent Compile accepts.
	MaxJitterPercent = 1000
	// MaxRetryAfter caps every honoured Retry-After, whatever RetryAfter.MaxDelay allows: a sink or a
	// handler asking for a longer wait waits a year.
	MaxRetryAfter = 365 * 24 * time.Hour
	// MaxScheduleDelay is the longest delay any policy Compile accepts gives a retry: an honoured
	// Retry-After (at most MaxRetryAfter) or a backoff delay (at most MaxTotalDelay, the bound of the
	// whole plan). A retry due later than that after it was scheduled was not scheduled by a policy.
	MaxScheduleDelay = max(MaxRetryAfter, MaxTotalDelay)
)

// Jitter is the random part of a retry delay. Only the fields of the chosen Mode are read.
type Jitter struct {
	// Mode is None (the default when empty), Additive, Proportional or Full.
	Mode JitterMode
	// Max is the largest delay Additive jitter adds: the delay is raw + U(0, Max). At least 0.
	Max time.Duration
	// MinPercent is the lower bound of Proportional jitter, 0..100.
	MinPercent int32
	// MaxPercent is the upper bound of Proportional jitter, 100..MaxJitterPercent: the delay is
	// delay * U(MinPercent, MaxPercent)/100, e.g. 80..120 or 50..150.
	MaxPercent int32
}

// Backoff is exponential backoff with optional jitter and a cap. The raw delay before retry n is
// InitialDelay * Multiplier^(n-1); the nominal delay is min(raw, MaxDelay).
type Backoff struct {
	// InitialDelay is the delay before the first retry (before delivery attempt 2). At least 0.
	InitialDelay time.Duration
	// Multiplier is a plain decimal string of at least 1, such as "2" or "1.5" (no sign, no exponent,
	// at most MaxMultiplierLength characters). It is parsed exactly with math/big.
	Multiplier string
	// MaxDelay caps the delay; it must be at least InitialDelay.
	MaxDelay time.Duration
	// Jitter is the random part of the delay.
	Jitter Jitter
	// Cap is where MaxDelay applies relative to jitter; empty means CapAfterJitter.
	Cap CapPlacement
}

// Rule matches failed deliveries and says what to do with them. A rule matches when ANY of its HTTP
// statuses, error types or message patterns matches.
type Rule struct {
	// Name identifies the rule (in Classified.Rule, metrics and dead-letter headers). Required and
	// unique within a policy.
	Name string
	// Action for matching outcomes: Retry, DeadLetter or Drop.
	Action Action
	// HTTPStatuses are codes ("408") or inclusive ranges ("500-599") within 100..599.
	HTTPStatuses []string
	// ErrorTypes are error type names matched exactly ("TimeoutError").
	ErrorTypes []string
	// MessagePatterns are RE2 regular expressions matched (unanchored) against the error message,
	// within the pattern budgets (MaxPatternInstructions, MaxPatternRepeat, MaxPolicyInstructions).
	MessagePatterns []string
	// MaxAttempts is the number of deliveries in all allowed when this rule matched; 0 means the
	// policy's. Only for Retry rules, and at most the policy's MaxAttempts.
	MaxAttempts int32
}

// Classification sorts failed deliveries: rules are tried in order, the first match decides, and
// DefaultAction applies when none matches.
type Classification struct {
	// DefaultAction applies to outcomes no rule matches; empty means DeadLetter.
	DefaultAction Action
	// Rules are tried in order.
	Rules []Rule
}

// RetryAfter says whether a sink's Retry-After replaces the backoff delay.
type RetryAfter struct {
	// Honor makes a positive Outcome.RetryAfter replace the sampled backoff delay.
	Honor bool
	// MaxDelay caps an honoured Retry-After; 0 means Backoff.MaxDelay. Above MaxRetryAfter it is MaxRetryAfter.
	MaxDelay time.Duration
}

// CircuitBreakerConfig configures a Breaker (seed 001 section 5).
type CircuitBreakerConfig struct {
	// FailureRatioPercent opens the breaker when more than this percentage of the requests in the
	// window failed, 0..100 (100 never opens).
	FailureRatioPercent int32
	// MinimumRequests is how many requests the window must hold before the ratio counts. At least 1.
	MinimumRequests int32
	// Window is the sliding window over which outcomes are counted. Positive.
	Window time.Duration
	// OpenDuration is how long the breaker rejects requests before probing. Positive.
	OpenDuration time.Duration
	// HalfOpenRequests is how many probes the half-open breaker admits. At least 1.
	HalfOpenRequests int32
	// CloseSuccessPercent closes the half-open breaker once successes*100 >
	// CloseSuccessPercent*HalfOpenRequests, 0..99.
	CloseSuccessPercent int32
}

// Policy is a retry policy as declared (the Go form of a RetryPolicy spec). Compile validates it.
type Policy struct {
	// MaxAttempts is the number of deliveries in all, the first one included (seed 000: 6 = 1 + 5
	// retries), 1..MaxAttemptsLimit.
	MaxAttempts int32
	// Backoff is the delay schedule.
	Backoff Backoff
	// Classification decides which failures are retried.
	Classification Classification
	// AttemptTimeout bounds one delivery; 0 means none.
	AttemptTimeout time.Duration
	// Deadline is the total time a record may take, measured from the record's timestamp; 0 means none.
	Deadline time.Duration
	// RetryAfter says whether a sink's Retry-After is honoured.
	RetryAfter RetryAfter
	// CircuitBreaker configures a breaker; nil means no breaker.
	CircuitBreaker *CircuitBreakerConfig
}

// Rand is the injected random source: *math/rand.Rand satisfies it, and so does a deterministic fake.
// Int63n returns a uniform value in [0, n) for n > 0. Implementations need not be safe for concurrent
// use; callers that share one across goroutines must guard it.
type Rand interface {
	Int63n(n int64) int64
}
