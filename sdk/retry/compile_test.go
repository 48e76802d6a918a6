package retry_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

// designPolicy is the RetryPolicy example of shared/DESIGN.md.
func designPolicy() retry.Policy {
	return retry.Policy{
		MaxAttempts: 6,
		Backoff: retry.Backoff{
			InitialDelay: 2 * time.Second, Multiplier: "2", MaxDelay: 300 * time.Second,
			Jitter: retry.Jitter{Mode: retry.JitterAdditive, Max: time.Second}, Cap: retry.CapAfterJitter,
		},
		Classification: retry.Classification{
			DefaultAction: retry.ActionDeadLetter,
			Rules: []retry.Rule{
				{Name: "transient-http", Action: retry.ActionRetry, HTTPStatuses: []string{"408", "429", "500-599"}},
				{Name: "permanent-http", Action: retry.ActionDeadLetter, HTTPStatuses: []string{"400", "401", "403", "404", "422"}},
				{Name: "transient-errors", Action: retry.ActionRetry, ErrorTypes: []string{"TimeoutError", "ConnectionError"},
					MessagePatterns: []string{"(?i)timeout", "(?i)econnrefused"}, MaxAttempts: 3},
			},
		},
		AttemptTimeout: 30 * time.Second,
		Deadline:       20 * time.Minute,
		RetryAfter:     retry.RetryAfter{Honor: true, MaxDelay: 5 * time.Minute},
		CircuitBreaker: seed001Breaker(),
	}
}

func TestEverySeedAndTheDesignExampleCompile(t *testing.T) {
	for name, p := range map[string]retry.Policy{
		"seed 000": seed000Chatbot(), "seed 001": seed001Grading(), "seed 002": seed002Delegation(),
		"seed 003 chunks": seed003DocumentsChunks(), "seed 003 archives": seed003DocumentsArchives(),
		"seed 004": seed004Generic(), "design example": designPolicy(),
	} {
		if _, err := retry.Compile(p); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*retry.Policy)
		field  string
		want   string // substring of the whole error message
	}{
		{
			name:   "a message pattern that is not RE2 names the rule, the pattern and regexp's message",
			mutate: func(p *retry.Policy) { p.Classification.Rules[2].MessagePatterns = []string{"(?i"} },
			field:  "classification.rules[2].messagePatterns[0]",
			want:   "classification.rules[2].messagePatterns[0] \"(?i\" (rule \"transient-errors\") is not valid RE2: error parsing regexp: invalid or unsupported Perl syntax: `(?i`",
		},
		{
			name:   "an unclosed group names the second pattern",
			mutate: func(p *retry.Policy) { p.Classification.Rules[2].MessagePatterns[1] = "(timeout" },
			field:  "classification.rules[2].messagePatterns[1]",
			want:   "\"(timeout\" (rule \"transient-errors\") is not valid RE2: error parsing regexp: missing closing ): `(timeout`",
		},
		{
			name:   "a Perl lookahead is not RE2",
			mutate: func(p *retry.Policy) { p.Classification.Rules[2].MessagePatterns[1] = "time(?=out)" },
			field:  "classification.rules[2].messagePatterns[1]",
			want:   "invalid or unsupported Perl syntax",
		},
		{
			name:   "an HTTP status below 100",
			mutate: func(p *retry.Policy) { p.Classification.Rules[0].HTTPStatuses = []string{"099"} },
			field:  "classification.rules[0].httpStatuses[0]",
			want:   `"099" (rule "transient-http") is not an HTTP status code`,
		},
		{
			name:   "an HTTP status above 599",
			mutate: func(p *retry.Policy) { p.Classification.Rules[0].HTTPStatuses = []string{"408", "600"} },
			field:  "classification.rules[0].httpStatuses[1]",
			want:   `"600"`,
		},
		{
			name:   "an HTTP status range running backwards",
			mutate: func(p *retry.Policy) { p.Classification.Rules[0].HTTPStatuses = []string{"599-500"} },
			field:  "classification.rules[0].httpStatuses[0]",
			want:   "low <= high",
		},
		{
			name:   "an HTTP status range past 599",
			mutate: func(p *retry.Policy) { p.Classification.Rules[0].HTTPStatuses = []string{"500-600"} },
			field:  "classification.rules[0].httpStatuses[0]",
			want:   "within 100..599",
		},
		{
			name:   "an HTTP status that is not a number",
			mutate: func(p *retry.Policy) { p.Classification.Rules[0].HTTPStatuses = []string{"5xx"} },
			field:  "classification.rules[0].httpStatuses[0]",
			want:   `"5xx"`,
		},
		{
			name:   "a multiplier below 1",
			mutate: func(p *retry.Policy) { p.Backoff.Multiplier = "0.5" },
			field:  "backoff.multiplier",
			want:   `backoff.multiplier "0.5" must be at least 1`,
		},
		{
			name:   "a multiplier that is not a plain decimal",
			mutate: func(p *retry.Policy) { p.Backoff.Multiplier = "1e3" },
			field:  "backoff.multiplier",
			want:   "is not a plain decimal number",
		},
		{
			name:   "a multiplier written as a fraction",
			mutate: func(p *retry.Policy) { p.Backoff.Multiplier = "3/2" },
			field:  "backoff.multiplier",
			want:   "is not a plain decimal number",
		},
		{
			name:   "a missing multiplier",
			mutate: func(p *retry.Policy) { p.Backoff.Multiplier = "" },
			field:  "backoff.multiplier",
			want:   "is required",
		},
		{
			name:   "zero attempts",
			mutate: func(p *retry.Policy) { p.MaxAttempts = 0 },
			field:  "maxAttempts",
			want:   "maxAttempts 0 must be between 1 and 100",
		},
		{
			name:   "more than 100 attempts",
			mutate: func(p *retry.Policy) { p.MaxAttempts = 101 },
			field:  "maxAttempts",
			want:   "between 1 and 100",
		},
		{
			name: "a plan whose latest total delay exceeds 30 days",
			mutate: func(p *retry.Policy) {
				p.MaxAttempts = 40
				p.Backoff = retry.Backoff{InitialDelay: time.Hour, Multiplier: "2", MaxDelay: 24 * time.Hour}
			},
			field: "backoff",
			want:  "unbounded plan: the latest total delay over 39 retries is 847h0m0s, more than the 720h0m0s (30 days) allowed",
		},
		{
			name:   "a cap below the initial delay",
			mutate: func(p *retry.Policy) { p.Backoff.MaxDelay = time.Second },
			field:  "backoff.maxDelay",
			want:   "must be at least backoff.initialDelay (2s)",
		},
		{
			name:   "a negative initial delay",
			mutate: func(p *retry.Policy) { p.Backoff.InitialDelay = -time.Second },
			field:  "backoff.initialDelay",
			want:   "must not be negative",
		},
		{
			name:   "negative additive jitter",
			mutate: func(p *retry.Policy) { p.Backoff.Jitter.Max = -time.Second },
			field:  "backoff.jitter.max",
			want:   "must not be negative",
		},
		{
			name: "proportional jitter whose window excludes the nominal delay",
			mutate: func(p *retry.Policy) {
				p.Backoff.Jitter = retry.Jitter{Mode: retry.JitterProportional, MinPercent: 110, MaxPercent: 150}
			},
			field: "backoff.jitter.minPercent",
			want:  "between 0 and 100",
		},
		{
			name: "proportional jitter above 1000 percent",
			mutate: func(p *retry.Policy) {
				p.Backoff.Jitter = retry.Jitter{Mode: retry.JitterProportional, MinPercent: 80, MaxPercent: 1001}
			},
			field: "backoff.jitter.maxPercent",
			want:  "between 100 and 1000",
		},
		{
			name:   "an unknown jitter mode",
			mutate: func(p *retry.Policy) { p.Backoff.Jitter.Mode = "Decorrelated" },
			field:  "backoff.jitter.mode",
			want:   `"Decorrelated" must be None, Additive, Proportional or Full`,
		},
		{
			name:   "an unknown cap placement",
			mutate: func(p *retry.Policy) { p.Backoff.Cap = "Never" },
			field:  "backoff.cap",
			want:   "must be AfterJitter or BeforeJitter",
		},
		{
			name:   "an unknown default action",
			mutate: func(p *retry.Policy) { p.Classification.DefaultAction = "Ignore" },
			field:  "classification.defaultAction",
			want:   "must be Retry, DeadLetter or Drop",
		},
		{
			name:   "an unknown rule action",
			mutate: func(p *retry.Policy) { p.Classification.Rules[1].Action = "Park" },
			field:  "classification.rules[1].action",
			want:   `(rule "permanent-http")`,
		},
		{
			name:   "a rule without a name",
			mutate: func(p *retry.Policy) { p.Classification.Rules[1].Name = "" },
			field:  "classification.rules[1].name",
			want:   "is required",
		},
		{
			name:   "two rules with one name",
			mutate: func(p *retry.Policy) { p.Classification.Rules[2].Name = "transient-http" },
			field:  "classification.rules[2].name",
			want:   "is also the name of classification.rules[0]",
		},
		{
			name: "a rule that matches nothing",
			mutate: func(p *retry.Policy) {
				p.Classification.Rules[1] = retry.Rule{Name: "empty", Action: retry.ActionDeadLetter}
			},
			field: "classification.rules[1]",
			want:  "needs at least one of httpStatuses, errorTypes or messagePatterns",
		},
		{
			name:   "an empty error type",
			mutate: func(p *retry.Policy) { p.Classification.Rules[2].ErrorTypes = []string{"TimeoutError", ""} },
			field:  "classification.rules[2].errorTypes[1]",
			want:   "must not be empty",
		},
		{
			name:   "a rule allowing more attempts than the policy",
			mutate: func(p *retry.Policy) { p.Classification.Rules[2].MaxAttempts = 7 },
			field:  "classification.rules[2].maxAttempts",
			want:   "must not exceed the policy's maxAttempts (6)",
		},
		{
			name:   "a rule with attempts that does not retry",
			mutate: func(p *retry.Policy) { p.Classification.Rules[1].MaxAttempts = 2 },
			field:  "classification.rules[1].maxAttempts",
			want:   "only applies to rules with action Retry",
		},
		{
			name:   "a negative deadline",
			mutate: func(p *retry.Policy) { p.Deadline = -time.Minute },
			field:  "deadline",
			want:   "must not be negative",
		},
		{
			name:   "a negative attempt timeout",
			mutate: func(p *retry.Policy) { p.AttemptTimeout = -time.Minute },
			field:  "attemptTimeout",
			want:   "must not be negative",
		},
		{
			name:   "a negative Retry-After cap",
			mutate: func(p *retry.Policy) { p.RetryAfter.MaxDelay = -time.Minute },
			field:  "retryAfter.maxDelay",
			want:   "must not be negative",
		},
		{
			name:   "a circuit breaker that can never close",
			mutate: func(p *retry.Policy) { p.CircuitBreaker.CloseSuccessPercent = 100 },
			field:  "circuitBreaker.closeSuccessPercent",
			want:   "between 0 and 99",
		},
		{
			name:   "a circuit breaker without a window",
			mutate: func(p *retry.Policy) { p.CircuitBreaker.Window = 0 },
			field:  "circuitBreaker.window",
			want:   "must be positive",
		},
		{
			name:   "a circuit breaker without probes",
			mutate: func(p *retry.Policy) { p.CircuitBreaker.HalfOpenRequests = 0 },
			field:  "circuitBreaker.halfOpenRequests",
			want:   "must be at least 1",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := designPolicy()
			tc.mutate(&p)
			c, err := retry.Compile(p)
			if err == nil {
				t.Fatalf("Compile accepted the policy: %+v", c.Plan())
			}
			if c != nil {
				t.Errorf("Compile returned a policy with its error")
			}
			var verr *retry.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("error %T is not a *ValidationError: %v", err, err)
			}
			var fields []string
			for _, fe := range verr.Errors {
				fields = append(fields, fe.Field)
			}
			if len(fields) != 1 || fields[0] != tc.field {
				t.Errorf("fields %q, want exactly [%q]", fields, tc.field)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			var fe *retry.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("errors.As found field error %+v, want field %q", fe, tc.field)
			}
		})
	}
}

func TestCompileReportsEveryProblemAtOnce(t *testing.T) {
	p := designPolicy()
	p.MaxAttempts = 0
	p.Backoff.Multiplier = "x"
	p.Classification.Rules[0].HTTPStatuses = []string{"700"}
	p.Classification.Rules[2].MessagePatterns = []string{"(", "ok", "["}
	_, err := retry.Compile(p)
	var verr *retry.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("error %v is not a *ValidationError", err)
	}
	var fields []string
	for _, fe := range verr.Errors {
		fields = append(fields, fe.Field)
	}
	want := []string{
		"maxAttempts", "backoff.multiplier", "classification.rules[0].httpStatuses[0]",
		"classification.rules[2].messagePatterns[0]", "classification.rules[2].messagePatterns[2]",
	}
	if strings.Join(fields, ",") != strings.Join(want, ",") {
		t.Errorf("fields %q, want %q", fields, want)
	}
}

func TestCompileAppliesDefaultsToEmptyEnums(t *testing.T) {
	c := mustCompile(t, retry.Policy{
		MaxAttempts: 3,
		Backoff:     retry.Backoff{InitialDelay: time.Second, Multiplier: "2", MaxDelay: time.Minute},
	})
	if w, _ := c.Window(2); w != (retry.Window{Attempt: 3, Nominal: 2 * time.Second, Earliest: 2 * time.Second, Latest: 2 * time.Second}) {
		t.Errorf("an empty jitter mode is not None: %+v", w)
	}
	if got := c.Classify(retry.Outcome{HTTPStatus: 503}); got.Action != retry.ActionDeadLetter {
		t.Errorf("an empty default action classifies as %q, want DeadLetter", got.Action)
	}
}

func TestCompiledPolicyIsACopy(t *testing.T) {
	p := seed002Delegation()
	c := mustCompile(t, p)
	p.Classification.Rules[0].ErrorTypes[0] = "Changed"
	p.CircuitBreaker = seed001Breaker()
	got := c.Policy()
	if got.Classification.Rules[0].ErrorTypes[0] != "ProvisionedThroughputExceeded" || got.CircuitBreaker != nil {
		t.Errorf("the compiled policy changed with its input: %+v", got)
	}
	if c.Classify(retry.Outcome{ErrorType: "ProvisionedThroughputExceeded"}).Action != retry.ActionRetry {
		t.Errorf("classification changed with the input policy")
	}
}

func TestNewBreakerRejectsAnInvalidConfig(t *testing.T) {
	cfg := *seed001Breaker()
	cfg.MinimumRequests = 0
	if _, err := retry.NewBreaker(cfg, nil); err == nil || !strings.Contains(err.Error(), "minimumRequests 0 must be at least 1") {
		t.Fatalf("NewBreaker error %v, want minimumRequests", err)
	}
}
