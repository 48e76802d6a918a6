package retry

import "time"

// TransportError is a delivery failure below HTTP: the sink never answered.
type TransportError string

// The transport errors. TransportNone means the sink answered (see Outcome.HTTPStatus).
const (
	// TransportNone: no transport error.
	TransportNone TransportError = ""
	// TransportTimeout: the delivery timed out (including the policy's AttemptTimeout).
	TransportTimeout TransportError = "timeout"
	// TransportConnectionRefused: the connection was refused.
	TransportConnectionRefused TransportError = "connection_refused"
	// TransportConnectionReset: the connection was reset or closed early.
	TransportConnectionReset TransportError = "connection_reset"
	// TransportDNS: the sink's name did not resolve.
	TransportDNS TransportError = "dns"
	// TransportTLS: the TLS handshake or verification failed.
	TransportTLS TransportError = "tls"
)

// The error types transport errors are classified as.
const (
	// ErrorTypeTimeout is the error type of TransportTimeout.
	ErrorTypeTimeout = "TimeoutError"
	// ErrorTypeConnection is the error type of every other transport error.
	ErrorTypeConnection = "ConnectionError"
)

// ErrorType returns the error type a transport error is classified as: TimeoutError for
// TransportTimeout, "" for TransportNone, ConnectionError for anything else.
func (t TransportError) ErrorType() string {
	switch t {
	case TransportNone:
		return ""
	case TransportTimeout:
		return ErrorTypeTimeout
	default:
		return ErrorTypeConnection
	}
}

// Outcome is what one failed delivery produced.
type Outcome struct {
	// HTTPStatus is the sink's status code, or 0 when there is none.
	HTTPStatus int
	// ErrorType is the error type name the consumer reported ("ValidationError"), or "".
	ErrorType string
	// Message is the error message matched by message patterns.
	Message string
	// Transport is set when the sink never answered. It then takes precedence: the outcome is
	// classified with ErrorType = Transport.ErrorType() and no HTTP status, keeping Message.
	Transport TransportError
	// RetryAfter is the sink's Retry-After, or 0.
	RetryAfter time.Duration
}

// Classified is the result of classifying an Outcome.
type Classified struct {
	// Action is the matching rule's action, or the default action.
	Action Action
	// Rule is the matching rule's name, or "" when the default action applied.
	Rule string
	// MaxAttempts is the number of deliveries in all that applies: the rule's when it sets one, else
	// the policy's.
	MaxAttempts int32
	// ErrorType is the error type the outcome was classified with (the transport error's type when
	// there is one).
	ErrorType string
}

func (r *compiledRule) matches(status int, errorType, message string) bool {
	for _, s := range r.statuses {
		if status >= s.lo && status <= s.hi {
			return true
		}
	}
	for _, t := range r.errorTypes {
		if t == errorType {
			return true
		}
	}
	for i := range r.patterns {
		if r.patterns[i].match(message) {
			return true
		}
	}
	return false
}

// Classify applies the rules in order to o; the first rule with a matching HTTP status, error type or
// message pattern decides, and DefaultAction applies when none matches. It does not allocate.
func (c *Compiled) Classify(o Outcome) Classified {
	status, errorType := o.HTTPStatus, o.ErrorType
	if o.Transport != TransportNone {
		status, errorType = 0, o.Transport.ErrorType()
	}
	for i := range c.rules {
		r := &c.rules[i]
		if r.matches(status, errorType, o.Message) {
			return Classified{Action: r.action, Rule: r.name, MaxAttempts: r.maxAttempts, ErrorType: errorType}
		}
	}
	return Classified{Action: c.defaultAction, MaxAttempts: c.policy.MaxAttempts, ErrorType: errorType}
}

// Decision is what to do with a record after a failed delivery.
type Decision struct {
	// Action is Retry, DeadLetter or Drop.
	Action Action
	// Reason says why the record is dead-lettered; "" unless Action is DeadLetter.
	Reason Reason
	// Rule is the classification rule that matched, or "".
	Rule string
	// ErrorType is the error type the outcome was classified with.
	ErrorType string
	// MaxAttempts is the number of deliveries in all that applied.
	MaxAttempts int32
	// Delay is how long to wait before the next delivery; set only when Action is Retry.
	Delay time.Duration
	// Due is now + Delay, when the next delivery is due; set only when Action is Retry.
	Due time.Time
	// FromRetryAfter reports that Delay came from the sink's Retry-After rather than the backoff.
	FromRetryAfter bool
}

// Decide says what to do after delivery number attempt (deliveries made so far, this one included;
// values below 1 count as 1) failed with o, for a record with timestamp recordTime, at time now:
//
//   - classified DeadLetter: dead-letter with reason non_retriable_error;
//   - classified Drop: drop;
//   - classified Retry: when attempt >= the applicable MaxAttempts, dead-letter with reason
//     max_retries_exceeded; otherwise retry after a delay sampled for retry n = attempt (or, when
//     RetryAfter.Honor is set and o.RetryAfter > 0, after min(o.RetryAfter, RetryAfter.MaxDelay)),
//     unless now + delay is past recordTime + Deadline, which dead-letters with reason
//     deadline_exceeded.
//
// A nil rng uses math/rand/v2. Decide does not allocate.
func (c *Compiled) Decide(o Outcome, attempt int32, recordTime, now time.Time, rng Rand) Decision {
	cl := c.Classify(o)
	d := Decision{Action: cl.Action, Rule: cl.Rule, ErrorType: cl.ErrorType, MaxAttempts: cl.MaxAttempts}
	switch cl.Action {
	case ActionDeadLetter:
		d.Reason = ReasonNonRetriable
		return d
	case ActionRetry:
	default:
		return d
	}
	if attempt < 1 {
		attempt = 1
	}
	if attempt >= cl.MaxAttempts {
		d.Action, d.Reason = ActionDeadLetter, ReasonMaxRetriesExceeded
		return d
	}
	delay, _ := c.Sample(attempt, rng)
	if c.policy.RetryAfter.Honor && o.RetryAfter > 0 {
		delay, d.FromRetryAfter = min(o.RetryAfter, c.retryAfterMax), true
	}
	due := now.Add(delay)
	if dl, ok := c.DeadlineOf(recordTime); ok && due.After(dl) {
		d.Action, d.Reason, d.FromRetryAfter = ActionDeadLetter, ReasonDeadlineExceeded, false
		return d
	}
	d.Delay, d.Due = delay, due
	return d
}

// DeadlineOf returns recordTime + Deadline, and false when the policy has no deadline.
func (c *Compiled) DeadlineOf(recordTime time.Time) (time.Time, bool) {
	if c.policy.Deadline <= 0 {
		return time.Time{}, false
	}
	return recordTime.Add(c.policy.Deadline), true
}

// Expired is the pre-delivery deadline check: it reports whether a record with timestamp recordTime
// is older than the Deadline at time now (age > Deadline), in which case the record is to be
// dead-lettered with reason deadline_exceeded without being delivered. It is always false without a
// deadline.
func (c *Compiled) Expired(recordTime, now time.Time) bool {
	dl, ok := c.DeadlineOf(recordTime)
	return ok && now.After(dl)
}
