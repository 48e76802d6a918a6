package policy

import (
	"encoding/json"
	"fmt"
	"time"
)

// Spec is a retry policy as the dispatcher's config file carries it: the RetryPolicy resource's
// spec, field for field and in the same JSON (the operator's compatibility test holds every field
// of the one to the other). Build one in Go for library mode, or let the operator render it.
type Spec struct {
	// MaxAttempts is the number of deliveries in all, the first one included: 6 means one delivery
	// and up to 5 retries; 1 means no retry. From 1 to 100.
	MaxAttempts int32 `json:"maxAttempts"`
	// Backoff is the exponential backoff between deliveries; required when MaxAttempts is more than 1.
	Backoff Backoff `json:"backoff,omitzero"`
	// Classification decides which failures are retried, dead-lettered at once or dropped. Nil means
	// every failure is dead-lettered at once.
	Classification *Classification `json:"classification,omitempty"`
	// AttemptTimeout bounds one delivery (a longer one fails as TimeoutError). Nil means 30s.
	AttemptTimeout *Duration `json:"attemptTimeout,omitempty"`
	// Deadline is the total time a record may spend being retried, from its Kafka timestamp. Nil
	// means no deadline.
	Deadline *Duration `json:"deadline,omitempty"`
	// RetryAfter says whether a sink's Retry-After replaces the backoff delay. Nil means Honor,
	// capped at Backoff.MaxDelay.
	RetryAfter *RetryAfter `json:"retryAfter,omitempty"`
	// CircuitBreaker pauses consumption while the sink fails most requests. Nil means none.
	CircuitBreaker *CircuitBreaker `json:"circuitBreaker,omitempty"`
}

// Backoff is exponential backoff with optional jitter and a cap: the nominal delay before retry n
// (n = 1 for the second delivery) is min(InitialDelay * Multiplier^(n-1), MaxDelay).
type Backoff struct {
	// InitialDelay is the delay before the first retry (the second delivery).
	InitialDelay Duration `json:"initialDelay"`
	// Multiplier is the growth factor, a decimal string such as "2" or "1.5". Empty means "2".
	Multiplier string `json:"multiplier,omitempty"`
	// MaxDelay caps every delay; at least InitialDelay.
	MaxDelay Duration `json:"maxDelay"`
	// Jitter randomises each delay. Nil means none.
	Jitter *Jitter `json:"jitter,omitempty"`
	// Cap says whether MaxDelay caps the delay before or after jitter. Empty means AfterJitter.
	Cap CapPlacement `json:"cap,omitempty"`
}

// JitterMode is how random jitter is applied to a retry delay.
type JitterMode string

// The jitter modes.
const (
	// JitterNone applies no jitter.
	JitterNone JitterMode = "None"
	// JitterAdditive adds a random delay from 0 to Jitter.Max.
	JitterAdditive JitterMode = "Additive"
	// JitterProportional multiplies the delay by a random percentage from MinPercent to MaxPercent.
	JitterProportional JitterMode = "Proportional"
	// JitterFull picks a random delay from 0 to the nominal delay.
	JitterFull JitterMode = "Full"
)

// Jitter randomises retry delays so that records failing together do not retry together.
type Jitter struct {
	// Mode is the kind of jitter.
	Mode JitterMode `json:"mode"`
	// Max is the largest delay Additive jitter adds.
	Max *Duration `json:"max,omitempty"`
	// MinPercent is the smallest percentage of the delay Proportional jitter keeps.
	MinPercent *int32 `json:"minPercent,omitempty"`
	// MaxPercent is the largest percentage of the delay Proportional jitter keeps.
	MaxPercent *int32 `json:"maxPercent,omitempty"`
}

// CapPlacement says whether Backoff.MaxDelay caps the delay before or after jitter is applied.
type CapPlacement string

// The cap placements.
const (
	// CapAfterJitter caps the jittered delay: no delay exceeds MaxDelay.
	CapAfterJitter CapPlacement = "AfterJitter"
	// CapBeforeJitter caps the nominal delay, then applies jitter, which may exceed MaxDelay.
	CapBeforeJitter CapPlacement = "BeforeJitter"
)

// ClassificationAction is what to do with a failed delivery.
type ClassificationAction string

// DefaultAction is the action for failures that no classification rule matches (Retry or
// DeadLetter).
type DefaultAction string

// The actions.
const (
	// ActionRetry retries the record after the backoff delay, while attempts remain.
	ActionRetry ClassificationAction = "Retry"
	// ActionDeadLetter dead-letters the record at once.
	ActionDeadLetter ClassificationAction = "DeadLetter"
	// ActionDrop drops the record: committed, neither retried nor dead-lettered.
	ActionDrop ClassificationAction = "Drop"
)

// Classification decides what each failure leads to: the first rule that matches wins, else
// DefaultAction.
type Classification struct {
	// DefaultAction applies when no rule matches. Empty means DeadLetter.
	DefaultAction DefaultAction `json:"defaultAction,omitempty"`
	// Rules are tried in order.
	Rules []ClassificationRule `json:"rules,omitempty"`
}

// HTTPStatusMatch is an HTTP status code ("503") or an inclusive range of them ("500-599").
type HTTPStatusMatch string

// ClassificationRule matches failures by HTTP status, error type or message, and says what to do.
// A rule with several kinds of matchers matches a failure that any of them matches.
type ClassificationRule struct {
	// Name names the rule in logs, metrics and dead letters.
	Name string `json:"name"`
	// Action is what a matching failure leads to.
	Action ClassificationAction `json:"action"`
	// HTTPStatuses match the sink's response status.
	HTTPStatuses []HTTPStatusMatch `json:"httpStatuses,omitempty"`
	// ErrorTypes match the failure's error type (TimeoutError, ConnectionError, or a handler's).
	ErrorTypes []string `json:"errorTypes,omitempty"`
	// MessagePatterns are RE2 expressions matched against the failure's message.
	MessagePatterns []string `json:"messagePatterns,omitempty"`
	// MaxAttempts caps the attempts for failures this rule matches, at most the policy's.
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// RetryAfterMode says whether a sink's Retry-After response header is honoured.
type RetryAfterMode string

// The Retry-After modes.
const (
	// RetryAfterHonor waits as long as the sink asks (up to RetryAfter.MaxDelay).
	RetryAfterHonor RetryAfterMode = "Honor"
	// RetryAfterIgnore always uses the backoff delay.
	RetryAfterIgnore RetryAfterMode = "Ignore"
)

// RetryAfter says how a sink's Retry-After header is treated.
type RetryAfter struct {
	// Mode is Honor or Ignore.
	Mode RetryAfterMode `json:"mode"`
	// MaxDelay caps an honoured Retry-After. Nil means Backoff.MaxDelay. Above a year
	// (retry.MaxRetryAfter) it is a year.
	MaxDelay *Duration `json:"maxDelay,omitempty"`
}

// CircuitBreaker opens when too many deliveries fail, pausing consumption for OpenDuration, then
// lets a few probe deliveries through (half-open) to decide whether to close again. A zero or nil
// field takes the default in its comment.
type CircuitBreaker struct {
	// FailureRatioPercent opens the breaker when more than this share of the window failed (50).
	FailureRatioPercent int32 `json:"failureRatioPercent,omitempty"`
	// MinimumRequests is how many deliveries the window must hold before the ratio counts (10).
	MinimumRequests int32 `json:"minimumRequests,omitempty"`
	// Window is the sliding window the ratio is measured over (60s).
	Window *Duration `json:"window,omitempty"`
	// OpenDuration is how long the breaker stays open before probing (30s).
	OpenDuration *Duration `json:"openDuration,omitempty"`
	// HalfOpenRequests is how many probes the half-open breaker lets through (5).
	HalfOpenRequests int32 `json:"halfOpenRequests,omitempty"`
	// CloseSuccessPercent closes the breaker when more than this share of the probes succeeded (80).
	CloseSuccessPercent int32 `json:"closeSuccessPercent,omitempty"`
}

// Duration is a time.Duration written in JSON as Go formats it ("1m30s"), as Kubernetes writes
// durations: the config file's durations read the same in both.
type Duration struct {
	time.Duration
}

// MarshalJSON writes the duration as a string such as "1m30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string such as "1m30s" or "250ms".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration must be a string such as \"1m30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// D returns a Duration of d, for building a Spec in Go.
func D(d time.Duration) Duration { return Duration{Duration: d} }

// PD returns a pointer to a Duration of d, for the optional fields of a Spec.
func PD(d time.Duration) *Duration { return &Duration{Duration: d} }
