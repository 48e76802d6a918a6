package retry

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// FieldError is one problem with one field of a Policy. Field is the path of the field as it is
// spelled in the RetryPolicy spec ("classification.rules[2].messagePatterns[0]"), so that a caller can
// prefix it with "spec." and show it to the user.
type FieldError struct {
	// Field is the path of the offending field.
	Field string
	// Rule is the name of the classification rule the field belongs to, or "".
	Rule string
	// Value is the offending value (a string is shown quoted), or nil when there is none to show.
	Value any
	// Detail says what is wrong, phrased to follow the field and value ("must be at least 1").
	Detail string
}

// Error formats the problem as `<field> <value> (rule "<rule>") <detail>`, for example
//
//	classification.rules[2].messagePatterns[0] "(?i" (rule "transient") is not valid RE2: error parsing regexp: invalid or unsupported Perl syntax: `(?i`
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.Field)
	switch v := e.Value.(type) {
	case nil:
	case string:
		fmt.Fprintf(&b, " %q", v)
	default:
		fmt.Fprintf(&b, " %v", v)
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, " (rule %q)", e.Rule)
	}
	b.WriteByte(' ')
	b.WriteString(e.Detail)
	return b.String()
}

// ValidationError lists every problem Compile found in a Policy, in field order.
type ValidationError struct {
	// Errors holds one entry per problem; it is never empty.
	Errors []*FieldError
}

// Error joins the field errors with "; ".
func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		msgs[i] = fe.Error()
	}
	return "invalid retry policy: " + strings.Join(msgs, "; ")
}

// Unwrap returns the field errors, so that errors.As can find a *FieldError.
func (e *ValidationError) Unwrap() []error {
	errs := make([]error, len(e.Errors))
	for i, fe := range e.Errors {
		errs[i] = fe
	}
	return errs
}

type validator struct{ errs []*FieldError }

func (v *validator) add(field string, value any, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Value: value, Detail: fmt.Sprintf(format, args...)})
}

func (v *validator) addRule(field, rule string, value any, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Field: field, Rule: rule, Value: value, Detail: fmt.Sprintf(format, args...)})
}

// Compiled is a validated policy, ready for use: delay windows are precomputed, regular expressions
// compiled and HTTP status ranges parsed. It is immutable and safe for concurrent use.
type Compiled struct {
	policy        Policy
	steps         []step // steps[n-1] is retry n
	rules         []compiledRule
	defaultAction Action
	retryAfterMax time.Duration
}

type compiledRule struct {
	name        string
	action      Action
	maxAttempts int32
	statuses    []statusRange
	errorTypes  []string
	patterns    []textMatcher
}

type statusRange struct{ lo, hi int }

// Compile validates p and compiles it. It checks what a CRD schema cannot, and repeats the schema's
// checks so that a Policy built in Go is held to the same rules:
//
//   - MaxAttempts in 1..MaxAttemptsLimit; a rule's MaxAttempts in 0..the policy's, Retry rules only;
//   - the multiplier is a plain decimal of at least 1; delays are not negative; MaxDelay >= InitialDelay
//     (a policy of one attempt may leave the whole Backoff empty: it never waits);
//   - jitter bounds: Additive Max >= 0, Proportional 0 <= MinPercent <= 100 <= MaxPercent <= 1000;
//   - rules: a unique non-empty name, a known action, at least one matcher, HTTP statuses as a code or
//     "lo-hi" range within 100..599 with lo <= hi, non-empty error types, message patterns that
//     compile as RE2 within the budgets, checked before they are compiled: MaxPatternRepeat and
//     MaxPatternInstructions per pattern, MaxPolicyInstructions for all of them (see CheckPattern);
//   - the plan is bounded: the sum of every retry's latest delay is at most MaxTotalDelay;
//   - the circuit breaker settings (see CircuitBreakerConfig).
//
// Empty enum values take their defaults: Jitter.Mode None, Backoff.Cap AfterJitter,
// Classification.DefaultAction DeadLetter. On failure the error is a *ValidationError listing every
// problem found.
func Compile(p Policy) (*Compiled, error) {
	var v validator
	c := &Compiled{policy: clonePolicy(p)}
	p = c.policy

	attemptsOK := true
	if p.MaxAttempts < 1 || p.MaxAttempts > MaxAttemptsLimit {
		v.add("maxAttempts", p.MaxAttempts, "must be between 1 and %d", MaxAttemptsLimit)
		attemptsOK = false
	}
	// A policy of one attempt never waits: its backoff, when it gives none, is not checked.
	mult, backoffOK := big.NewRat(1, 1), true
	if p.MaxAttempts != 1 || p.Backoff != (Backoff{}) {
		mult, backoffOK = validateBackoff(&v, p.Backoff)
	}
	c.defaultAction = p.Classification.DefaultAction
	if c.defaultAction == "" {
		c.defaultAction = ActionDeadLetter
	}
	if !validAction(c.defaultAction) {
		v.add("classification.defaultAction", string(p.Classification.DefaultAction), "must be Retry, DeadLetter or Drop")
	}
	c.rules = compileRules(&v, p.Classification.Rules, p.MaxAttempts, attemptsOK)

	if p.AttemptTimeout < 0 {
		v.add("attemptTimeout", p.AttemptTimeout, "must not be negative")
	}
	if p.Deadline < 0 {
		v.add("deadline", p.Deadline, "must not be negative")
	}
	if p.RetryAfter.MaxDelay < 0 {
		v.add("retryAfter.maxDelay", p.RetryAfter.MaxDelay, "must not be negative")
	}
	c.retryAfterMax = p.RetryAfter.MaxDelay
	if c.retryAfterMax == 0 {
		c.retryAfterMax = p.Backoff.MaxDelay
	}
	c.retryAfterMax = min(c.retryAfterMax, MaxRetryAfter)
	if p.CircuitBreaker != nil {
		validateBreaker(&v, "circuitBreaker.", *p.CircuitBreaker)
	}

	if attemptsOK && backoffOK {
		c.steps = buildSteps(p.Backoff, mult, int(p.MaxAttempts)-1)
		var latest time.Duration
		for i := range c.steps {
			latest = satAdd(latest, time.Duration(c.steps[i].latest))
		}
		if latest > MaxTotalDelay {
			v.add("backoff", nil, "makes an unbounded plan: the latest total delay over %d retries is %v, more than the %v (30 days) allowed; lower maxAttempts, backoff.maxDelay or the jitter",
				len(c.steps), latest, MaxTotalDelay)
		}
	}
	if len(v.errs) > 0 {
		return nil, &ValidationError{Errors: v.errs}
	}
	return c, nil
}

func validAction(a Action) bool {
	return a == ActionRetry || a == ActionDeadLetter || a == ActionDrop
}

// parseMultiplier accepts plain decimals ("2", "1.5", "10.000") and returns them as exact rationals.
func parseMultiplier(s string) (*big.Rat, string) {
	if s == "" {
		return nil, "is required (a decimal of at least 1, such as \"2\" or \"1.5\")"
	}
	if len(s) > MaxMultiplierLength {
		return nil, fmt.Sprintf("is longer than %d characters", MaxMultiplierLength)
	}
	digits, dots := 0, 0
	for i := range len(s) {
		switch ch := s[i]; {
		case ch >= '0' && ch <= '9':
			digits++
		case ch == '.' && dots == 0 && i > 0 && i < len(s)-1:
			dots++
		default:
			return nil, "is not a plain decimal number such as \"2\" or \"1.5\""
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok || digits == 0 {
		return nil, "is not a plain decimal number such as \"2\" or \"1.5\""
	}
	if r.Cmp(big.NewRat(1, 1)) < 0 {
		return nil, "must be at least 1"
	}
	return r, ""
}

func validateBackoff(v *validator, b Backoff) (*big.Rat, bool) {
	n := len(v.errs)
	if b.InitialDelay < 0 {
		v.add("backoff.initialDelay", b.InitialDelay, "must not be negative")
	}
	mult, msg := parseMultiplier(b.Multiplier)
	if msg != "" {
		v.add("backoff.multiplier", b.Multiplier, "%s", msg)
	}
	switch {
	case b.MaxDelay < 0:
		v.add("backoff.maxDelay", b.MaxDelay, "must not be negative")
	case b.MaxDelay < b.InitialDelay:
		v.add("backoff.maxDelay", b.MaxDelay, "must be at least backoff.initialDelay (%v)", b.InitialDelay)
	}
	switch b.Jitter.Mode {
	case "", JitterNone, JitterFull:
	case JitterAdditive:
		if b.Jitter.Max < 0 {
			v.add("backoff.jitter.max", b.Jitter.Max, "must not be negative")
		}
	case JitterProportional:
		if b.Jitter.MinPercent < 0 || b.Jitter.MinPercent > 100 {
			v.add("backoff.jitter.minPercent", b.Jitter.MinPercent, "must be between 0 and 100, so that the nominal delay lies inside the window")
		}
		if b.Jitter.MaxPercent < 100 || b.Jitter.MaxPercent > MaxJitterPercent {
			v.add("backoff.jitter.maxPercent", b.Jitter.MaxPercent, "must be between 100 and %d, so that the nominal delay lies inside the window", MaxJitterPercent)
		}
	default:
		v.add("backoff.jitter.mode", string(b.Jitter.Mode), "must be None, Additive, Proportional or Full")
	}
	switch b.Cap {
	case "", CapAfterJitter, CapBeforeJitter:
	default:
		v.add("backoff.cap", string(b.Cap), "must be AfterJitter or BeforeJitter")
	}
	return mult, len(v.errs) == n
}

func compileRules(v *validator, rules []Rule, policyMax int32, policyMaxOK bool) []compiledRule {
	out := make([]compiledRule, 0, len(rules))
	seen := make(map[string]int, len(rules))
	var costs []patternCost
	for i, r := range rules {
		path := fmt.Sprintf("classification.rules[%d]", i)
		cr := compiledRule{name: r.Name, action: r.Action, maxAttempts: policyMax}
		if r.Name == "" {
			v.add(path+".name", nil, "is required")
		} else if j, dup := seen[r.Name]; dup {
			v.addRule(path+".name", r.Name, nil, "is also the name of classification.rules[%d]; rule names must be unique", j)
		} else {
			seen[r.Name] = i
		}
		if !validAction(r.Action) {
			v.addRule(path+".action", r.Name, string(r.Action), "must be Retry, DeadLetter or Drop")
		}
		if len(r.HTTPStatuses)+len(r.ErrorTypes)+len(r.MessagePatterns) == 0 {
			v.addRule(path, r.Name, nil, "needs at least one of httpStatuses, errorTypes or messagePatterns, or it never matches")
		}
		for j, s := range r.HTTPStatuses {
			sr, ok := parseStatus(s)
			if !ok {
				v.addRule(fmt.Sprintf("%s.httpStatuses[%d]", path, j), r.Name, s,
					"is not an HTTP status code (\"503\") or an inclusive range (\"500-599\") within 100..599 with low <= high")
				continue
			}
			cr.statuses = append(cr.statuses, sr)
		}
		for j, t := range r.ErrorTypes {
			if t == "" {
				v.addRule(fmt.Sprintf("%s.errorTypes[%d]", path, j), r.Name, nil, "must not be empty")
				continue
			}
			cr.errorTypes = append(cr.errorTypes, t)
		}
		for j, pat := range r.MessagePatterns {
			m, err := newTextMatcher(pat)
			var budget *BudgetError
			switch {
			case errors.As(err, &budget):
				v.addRule(fmt.Sprintf("%s.messagePatterns[%d]", path, j), r.Name, quotePattern(pat), "%v", budget)
				continue
			case err != nil:
				v.addRule(fmt.Sprintf("%s.messagePatterns[%d]", path, j), r.Name, pat, "is not valid RE2: %v", err)
				continue
			}
			cr.patterns = append(cr.patterns, m)
			costs = append(costs, patternCost{rule: i, pattern: j, name: r.Name, insts: m.insts})
		}
		switch {
		case r.MaxAttempts == 0:
		case r.Action != ActionRetry:
			v.addRule(path+".maxAttempts", r.Name, r.MaxAttempts, "only applies to rules with action Retry")
		case r.MaxAttempts < 0 || r.MaxAttempts > MaxAttemptsLimit:
			v.addRule(path+".maxAttempts", r.Name, r.MaxAttempts, "must be between 1 and %d", MaxAttemptsLimit)
		case policyMaxOK && r.MaxAttempts > policyMax:
			v.addRule(path+".maxAttempts", r.Name, r.MaxAttempts, "must not exceed the policy's maxAttempts (%d)", policyMax)
		default:
			cr.maxAttempts = r.MaxAttempts
		}
		out = append(out, cr)
	}
	checkPolicyBudget(v, costs)
	return out
}

// parseStatus parses "503" or "500-599" (three digits each, within 100..599, low <= high).
func parseStatus(s string) (statusRange, bool) {
	code := func(t string) (int, bool) {
		if len(t) != 3 {
			return 0, false
		}
		n := 0
		for i := range 3 {
			if t[i] < '0' || t[i] > '9' {
				return 0, false
			}
			n = n*10 + int(t[i]-'0')
		}
		return n, n >= 100 && n <= 599
	}
	if lo, ok := code(s); ok {
		return statusRange{lo, lo}, true
	}
	if len(s) != 7 || s[3] != '-' {
		return statusRange{}, false
	}
	lo, ok1 := code(s[:3])
	hi, ok2 := code(s[4:])
	if !ok1 || !ok2 || lo > hi {
		return statusRange{}, false
	}
	return statusRange{lo, hi}, true
}

func validateBreaker(v *validator, prefix string, cfg CircuitBreakerConfig) {
	if cfg.FailureRatioPercent < 0 || cfg.FailureRatioPercent > 100 {
		v.add(prefix+"failureRatioPercent", cfg.FailureRatioPercent, "must be between 0 and 100")
	}
	if cfg.MinimumRequests < 1 {
		v.add(prefix+"minimumRequests", cfg.MinimumRequests, "must be at least 1")
	}
	if cfg.Window <= 0 {
		v.add(prefix+"window", cfg.Window, "must be positive")
	}
	if cfg.OpenDuration <= 0 {
		v.add(prefix+"openDuration", cfg.OpenDuration, "must be positive")
	}
	if cfg.HalfOpenRequests < 1 {
		v.add(prefix+"halfOpenRequests", cfg.HalfOpenRequests, "must be at least 1")
	}
	if cfg.CloseSuccessPercent < 0 || cfg.CloseSuccessPercent > 99 {
		v.add(prefix+"closeSuccessPercent", cfg.CloseSuccessPercent, "must be between 0 and 99 (the success ratio must be above it to close)")
	}
}

// ValidateCircuitBreaker checks a CircuitBreakerConfig on its own; it returns a *ValidationError or nil.
func ValidateCircuitBreaker(cfg CircuitBreakerConfig) error {
	var v validator
	validateBreaker(&v, "", cfg)
	if len(v.errs) > 0 {
		return &ValidationError{Errors: v.errs}
	}
	return nil
}

func clonePolicy(p Policy) Policy {
	out := p
	out.Classification.Rules = make([]Rule, len(p.Classification.Rules))
	for i, r := range p.Classification.Rules {
		r.HTTPStatuses = append([]string(nil), r.HTTPStatuses...)
		r.ErrorTypes = append([]string(nil), r.ErrorTypes...)
		r.MessagePatterns = append([]string(nil), r.MessagePatterns...)
		out.Classification.Rules[i] = r
	}
	if p.CircuitBreaker != nil {
		cb := *p.CircuitBreaker
		out.CircuitBreaker = &cb
	}
	return out
}

// Policy returns a copy of the policy as it was compiled (empty enum values are kept as given).
func (c *Compiled) Policy() Policy { return clonePolicy(c.policy) }

// MaxAttempts returns the policy's number of deliveries in all.
func (c *Compiled) MaxAttempts() int32 { return c.policy.MaxAttempts }

// Retries returns the number of retries of the plan: MaxAttempts-1.
func (c *Compiled) Retries() int32 { return int32(len(c.steps)) }
