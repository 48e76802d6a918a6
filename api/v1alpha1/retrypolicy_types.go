package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// JitterMode is how random jitter is applied to a retry delay.
// +kubebuilder:validation:Enum=None;Additive;Proportional;Full
type JitterMode string

// The jitter modes.
const (
	// JitterNone applies no jitter: every delay is its nominal value.
	JitterNone JitterMode = "None"
	// JitterAdditive adds U(0, max) to the delay: with max 1s, between 0 and 1s more.
	JitterAdditive JitterMode = "Additive"
	// JitterProportional multiplies the delay by U(minPercent, maxPercent)/100: 80 and 120 give a delay within 20% of its nominal value.
	JitterProportional JitterMode = "Proportional"
	// JitterFull draws the delay from U(0, delay) ("full jitter").
	JitterFull JitterMode = "Full"
)

// CapPlacement says whether backoff.maxDelay caps the delay before or after jitter is applied.
// +kubebuilder:validation:Enum=AfterJitter;BeforeJitter
type CapPlacement string

// The cap placements.
const (
	// CapAfterJitter computes min(delay + jitter, maxDelay): no delay ever exceeds maxDelay.
	CapAfterJitter CapPlacement = "AfterJitter"
	// CapBeforeJitter computes min(delay, maxDelay) and then applies jitter, so a capped delay still
	// spreads around maxDelay.
	CapBeforeJitter CapPlacement = "BeforeJitter"
)

// ClassificationAction is what to do with a failed delivery.
// +kubebuilder:validation:Enum=Retry;DeadLetter;Drop
type ClassificationAction string

// The classification actions.
const (
	// ActionRetry schedules another delivery after the backoff delay.
	ActionRetry ClassificationAction = "Retry"
	// ActionDeadLetter sends the record to the dead letter queue at once.
	ActionDeadLetter ClassificationAction = "DeadLetter"
	// ActionDrop commits the record without retrying or dead-lettering it. Use with care.
	ActionDrop ClassificationAction = "Drop"
)

// DefaultAction is the action for failures that no classification rule matches.
// +kubebuilder:validation:Enum=Retry;DeadLetter
type DefaultAction string

// RetryAfterMode says whether a sink's Retry-After response header is honoured.
// +kubebuilder:validation:Enum=Honor;Ignore
type RetryAfterMode string

// The Retry-After modes.
const (
	// RetryAfterHonor waits as long as the sink asks (up to retryAfter.maxDelay) instead of the backoff delay.
	RetryAfterHonor RetryAfterMode = "Honor"
	// RetryAfterIgnore always uses the backoff delay.
	RetryAfterIgnore RetryAfterMode = "Ignore"
)

// RetryPolicySpec is how failed deliveries are retried and when they give up.
// +kubebuilder:validation:XValidation:rule="self.maxAttempts == 1 || has(self.backoff)",message="backoff is required when maxAttempts is more than 1: it sets the delays between the deliveries"
// +kubebuilder:validation:XValidation:rule="!has(self.deadline) || !has(self.backoff) || duration(self.deadline) >= duration(self.backoff.initialDelay)",message="deadline must be at least backoff.initialDelay, or no retry could ever run before the deadline"
// +kubebuilder:validation:XValidation:rule="!has(self.classification) || !has(self.classification.rules) || self.classification.rules.all(r, !has(r.maxAttempts) || r.maxAttempts <= self.maxAttempts)",message="a classification rule's maxAttempts cannot exceed the policy's maxAttempts"
type RetryPolicySpec struct {
	// maxAttempts is the number of deliveries in all, the first one included: 6 means one delivery and
	// up to 5 retries. 1 means no retry: a failure goes straight to the dead letter queue.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	MaxAttempts int32 `json:"maxAttempts"`

	// backoff is the exponential backoff between deliveries. Required when maxAttempts is more than 1;
	// a policy of one attempt (no retry) needs none.
	// +optional
	Backoff Backoff `json:"backoff,omitzero"`

	// classification decides which failures are retried, dead-lettered at once or dropped. Absent means
	// every failure is dead-lettered at once (defaultAction DeadLetter, no rules).
	// +optional
	Classification *Classification `json:"classification,omitempty"`

	// attemptTimeout bounds one delivery; a delivery that takes longer fails as a timeout
	// (error type TimeoutError). Defaults to 30s.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	AttemptTimeout *metav1.Duration `json:"attemptTimeout,omitempty"`

	// deadline is the total time a record may spend being retried, measured from the record's Kafka
	// timestamp (an SLA such as 20m). A record past it is dead-lettered with reason deadline_exceeded,
	// and a retry that would fall due after it is dead-lettered at once. Absent means no deadline.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	Deadline *metav1.Duration `json:"deadline,omitempty"`

	// retryAfter says whether a sink's Retry-After header replaces the backoff delay. Absent means
	// Honor, capped at backoff.maxDelay.
	// +optional
	RetryAfter *RetryAfter `json:"retryAfter,omitempty"`

	// circuitBreaker stops deliveries (pausing consumption instead of spending attempts) while the sink
	// fails most requests. Absent means no circuit breaker.
	// +optional
	CircuitBreaker *CircuitBreaker `json:"circuitBreaker,omitempty"`
}

// Backoff is exponential backoff with optional jitter and a cap: the nominal delay before retry n
// (n = 1 for the second delivery) is min(initialDelay * multiplier^(n-1), maxDelay).
// +kubebuilder:validation:XValidation:rule="duration(self.maxDelay) >= duration(self.initialDelay)",message="backoff.maxDelay must be at least backoff.initialDelay"
type Backoff struct {
	// initialDelay is the delay before the first retry (the second delivery), such as 2s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +required
	InitialDelay metav1.Duration `json:"initialDelay"`

	// multiplier grows the delay from one retry to the next, as a decimal string of at least 1 with at
	// most 6 decimals ("2", "1.5"). Defaults to "2".
	// +kubebuilder:default="2"
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[1-9][0-9]{0,3}(\\\\.[0-9]{1,6})?$')",message="backoff.multiplier must be a decimal number from 1 to 9999 with at most 6 decimals, such as \"2\" or \"1.5\""
	// +optional
	Multiplier string `json:"multiplier,omitempty"`

	// maxDelay caps every delay (see cap for where the cap sits relative to jitter).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +required
	MaxDelay metav1.Duration `json:"maxDelay"`

	// jitter spreads retries over time so that many failures do not retry in lockstep. Absent means
	// no jitter.
	// +optional
	Jitter *Jitter `json:"jitter,omitempty"`

	// cap says whether maxDelay applies after jitter (AfterJitter, the default: no delay ever exceeds
	// maxDelay) or before it (BeforeJitter: the capped delay is then jittered).
	// +kubebuilder:default=AfterJitter
	// +optional
	Cap CapPlacement `json:"cap,omitempty"`
}

// Jitter is the random part of a retry delay.
// +kubebuilder:validation:XValidation:rule="self.mode == 'Additive' ? has(self.max) : !has(self.max)",message="jitter.max is required for mode Additive and not allowed for other modes"
// +kubebuilder:validation:XValidation:rule="self.mode == 'Proportional' ? (has(self.minPercent) && has(self.maxPercent)) : (!has(self.minPercent) && !has(self.maxPercent))",message="jitter.minPercent and jitter.maxPercent are required for mode Proportional and not allowed for other modes"
type Jitter struct {
	// mode is None, Additive (add U(0, max)), Proportional (multiply by U(minPercent, maxPercent)/100)
	// or Full (draw from U(0, delay)).
	// +required
	Mode JitterMode `json:"mode"`

	// max is the largest delay Additive jitter adds, such as 1s.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	Max *metav1.Duration `json:"max,omitempty"`

	// minPercent is the lower bound of Proportional jitter, 0 to 100, such as 80.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MinPercent *int32 `json:"minPercent,omitempty"`

	// maxPercent is the upper bound of Proportional jitter, 100 to 1000, such as 120.
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxPercent *int32 `json:"maxPercent,omitempty"`
}

// Classification sorts failed deliveries into retry, dead-letter and drop. Rules are tried in order;
// the first that matches decides.
type Classification struct {
	// defaultAction applies to failures no rule matches: Retry or DeadLetter. Defaults to DeadLetter.
	// +kubebuilder:default=DeadLetter
	// +optional
	DefaultAction DefaultAction `json:"defaultAction,omitempty"`

	// rules are tried in order; the first rule with a matching HTTP status, error type or message
	// pattern decides the action.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	// +optional
	Rules []ClassificationRule `json:"rules,omitempty"`
}

// HTTPStatusMatch is an HTTP status code ("503") or an inclusive range of codes ("500-599"), within
// 100..599.
// +kubebuilder:validation:MaxLength=7
// +kubebuilder:validation:XValidation:rule="self.matches('^[1-5][0-9][0-9](-[1-5][0-9][0-9])?$')",message="an HTTP status must be a code from 100 to 599 (\"503\") or a range of such codes (\"500-599\")"
// +kubebuilder:validation:XValidation:rule="!self.matches('^[1-5][0-9][0-9]-[1-5][0-9][0-9]$') || int(self.substring(0, 3)) <= int(self.substring(4, 7))",message="an HTTP status range must run from low to high, such as \"500-599\""
type HTTPStatusMatch string

// ClassificationRule matches failed deliveries and says what to do with them. A rule matches when any
// one of its HTTP statuses, error types or message patterns matches.
// +kubebuilder:validation:XValidation:rule="has(self.httpStatuses) || has(self.errorTypes) || has(self.messagePatterns)",message="a classification rule needs at least one of httpStatuses, errorTypes or messagePatterns"
type ClassificationRule struct {
	// name identifies the rule in status, metrics and dead-letter headers.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +required
	Name string `json:"name"`

	// action for matching failures: Retry, DeadLetter or Drop.
	// +required
	Action ClassificationAction `json:"action"`

	// httpStatuses are status codes or ranges the sink answers with ("429", "500-599").
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	HTTPStatuses []HTTPStatusMatch `json:"httpStatuses,omitempty"`

	// errorTypes are error type names, matched exactly: those a consumer reports in library mode
	// ("ValidationError"), and TimeoutError and ConnectionError, which the dispatcher reports for
	// transport failures.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +listType=atomic
	// +optional
	ErrorTypes []string `json:"errorTypes,omitempty"`

	// messagePatterns are RE2 regular expressions matched against the error message ("(?i)timeout").
	// A pattern that does not compile, or is above the pattern budget, makes the policy Ready=False
	// with reason InvalidSpec: a pattern may compile to at most 2000 instructions (about one per
	// character, a repeat counting its copies: "(?:abc){1000}" is about 3000) and all of a policy's
	// patterns to at most 10000.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=256
	// +listType=atomic
	// +optional
	MessagePatterns []string `json:"messagePatterns,omitempty"`

	// maxAttempts overrides the policy's maxAttempts for failures this rule matches (deliveries in
	// all). It cannot exceed the policy's.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`
}

// RetryAfter says how a sink's Retry-After header is treated.
type RetryAfter struct {
	// mode is Honor (wait as long as the sink asks, up to maxDelay) or Ignore.
	// +required
	Mode RetryAfterMode `json:"mode"`

	// maxDelay caps an honoured Retry-After. Defaults to backoff.maxDelay. A cap above 8760h (a year)
	// counts as 8760h, the longest any Retry-After waits.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`
}

// CircuitBreaker opens when too many deliveries fail, pausing consumption for openDuration, then lets
// a few probe deliveries through (half-open) to decide whether to close again.
type CircuitBreaker struct {
	// failureRatioPercent opens the breaker when more than this share of deliveries in the window
	// failed. Defaults to 50.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	FailureRatioPercent int32 `json:"failureRatioPercent,omitempty"`

	// minimumRequests is how many deliveries the window must hold before the ratio counts.
	// Defaults to 10.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MinimumRequests int32 `json:"minimumRequests,omitempty"`

	// window is the sliding time window over which the failure ratio is measured. Defaults to 60s.
	// +kubebuilder:default="60s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	Window *metav1.Duration `json:"window,omitempty"`

	// openDuration is how long the breaker stays open before probing. Defaults to 30s.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	OpenDuration *metav1.Duration `json:"openDuration,omitempty"`

	// halfOpenRequests is how many probe deliveries the half-open breaker lets through. Any failure
	// among them reopens it. Defaults to 5.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	HalfOpenRequests int32 `json:"halfOpenRequests,omitempty"`

	// closeSuccessPercent closes the breaker when more than this share of the half-open probes
	// succeeded. Defaults to 80.
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=99
	// +optional
	CloseSuccessPercent int32 `json:"closeSuccessPercent,omitempty"`
}

// ScheduledRetry is one retry of the computed plan: the delay before a delivery attempt.
type ScheduledRetry struct {
	// attempt is the delivery this delay comes before (2 for the first retry).
	// +required
	Attempt int32 `json:"attempt"`

	// delay is the nominal delay, before jitter.
	// +required
	Delay metav1.Duration `json:"delay"`

	// earliest is the shortest delay jitter can produce.
	// +required
	Earliest metav1.Duration `json:"earliest"`

	// latest is the longest delay jitter can produce.
	// +required
	Latest metav1.Duration `json:"latest"`

	// tier is the retry tier (topic <source>.retry.<tier> with ByAttempt naming) that holds the record
	// while it waits.
	// +required
	Tier int32 `json:"tier"`
}

// DelayBounds is a best and worst case.
type DelayBounds struct {
	// earliest is the best case.
	// +required
	Earliest metav1.Duration `json:"earliest"`

	// latest is the worst case.
	// +required
	Latest metav1.Duration `json:"latest"`
}

// RetryPolicyStatus is the computed plan of a RetryPolicy and who uses it.
type RetryPolicyStatus struct {
	// conditions hold Ready, True when the spec is valid and the plan computed; when False with reason
	// InvalidSpec the message names the problem.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// schedule has one entry per retry: the window of delays the dispatcher will use.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Schedule []ScheduledRetry `json:"schedule,omitempty"`

	// scheduleSummary is the nominal schedule in one line, such as "2s 4s 8s 16s 32s".
	// +kubebuilder:validation:MaxLength=256
	// +optional
	ScheduleSummary string `json:"scheduleSummary,omitempty"`

	// totalDelay is the sum of all retry delays, best and worst case: the time from the first failure
	// to the dead letter queue, not counting the deliveries themselves.
	// +optional
	TotalDelay *DelayBounds `json:"totalDelay,omitempty"`

	// pipelines is how many ConsumerPipelines use this policy.
	// +optional
	Pipelines *int32 `json:"pipelines,omitempty"`

	// pipelineNames lists the ConsumerPipelines using this policy, sorted, at most 20.
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	PipelineNames []string `json:"pipelineNames,omitempty"`

	// deadLetterMessages is the number of dead letters from the pipelines using this policy.
	// +optional
	DeadLetterMessages *int64 `json:"deadLetterMessages,omitempty"`
}

// RetryPolicy declares how failed Kafka record deliveries are retried: attempts, exponential backoff
// with jitter and a cap, error classification, timeouts, a deadline and a circuit breaker. Its status
// shows the computed schedule.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rp,categories=retryops
// +kubebuilder:printcolumn:name="Attempts",type=integer,JSONPath=`.spec.maxAttempts`
// +kubebuilder:printcolumn:name="Schedule",type=string,JSONPath=`.status.scheduleSummary`
// +kubebuilder:printcolumn:name="Pipelines",type=integer,JSONPath=`.status.pipelines`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RetryPolicy struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired retry behaviour.
	// +required
	Spec RetryPolicySpec `json:"spec"`

	// status is the computed plan and usage.
	// +optional
	Status RetryPolicyStatus `json:"status,omitempty"`
}

// RetryPolicyList is a list of RetryPolicy.
// +kubebuilder:object:root=true
type RetryPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items are the RetryPolicies.
	Items []RetryPolicy `json:"items"`
}

func init() {
	knownTypes = append(knownTypes, &RetryPolicy{}, &RetryPolicyList{})
}
