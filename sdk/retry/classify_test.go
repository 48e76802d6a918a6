package retry_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

type classifyCase struct {
	name    string
	outcome retry.Outcome
	action  retry.Action
	rule    string
}

func runClassify(t *testing.T, p retry.Policy, tests []classifyCase) {
	t.Helper()
	c := mustCompile(t, p)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(tc.outcome)
			if got.Action != tc.action || got.Rule != tc.rule {
				t.Errorf("Classify(%+v) = %+v, want action %q rule %q", tc.outcome, got, tc.action, tc.rule)
			}
		})
	}
}

func TestClassifySeed000(t *testing.T) {
	var tests []classifyCase
	for _, code := range []int{408, 429, 500, 502, 503, 504} {
		tests = append(tests, classifyCase{name: "HTTP " + strconv.Itoa(code) + " is retried", outcome: retry.Outcome{HTTPStatus: code}, action: retry.ActionRetry, rule: "retriable-http"})
	}
	for _, et := range []string{"TimeoutError", "ConnectionError", "ServiceUnavailable", "RateLimitExceeded", "KafkaError", "MongoNetworkError", "WeaviateTimeoutError"} {
		tests = append(tests, classifyCase{name: et + " is retried", outcome: retry.Outcome{ErrorType: et, Message: "boom"}, action: retry.ActionRetry, rule: "retriable-errors"})
	}
	for _, code := range []int{400, 401, 403, 404, 422} {
		tests = append(tests, classifyCase{name: "HTTP " + strconv.Itoa(code) + " is dead-lettered", outcome: retry.Outcome{HTTPStatus: code}, action: retry.ActionDeadLetter, rule: "non-retriable"})
	}
	for _, et := range []string{"ValidationError", "AuthenticationError", "PermissionError", "NotFoundError", "BusinessLogicError"} {
		tests = append(tests, classifyCase{name: et + " is dead-lettered", outcome: retry.Outcome{ErrorType: et}, action: retry.ActionDeadLetter, rule: "non-retriable"})
	}
	tests = append(tests,
		classifyCase{name: "HTTP 501 is not in seed 000's list and falls through to non-retriable", outcome: retry.Outcome{HTTPStatus: 501}, action: retry.ActionDeadLetter},
		classifyCase{name: "an unknown error type falls through to non-retriable", outcome: retry.Outcome{ErrorType: "KeyError"}, action: retry.ActionDeadLetter},
		classifyCase{name: "a retriable error name wins over a non-retriable status, as seed 000 checks names first", outcome: retry.Outcome{ErrorType: "TimeoutError", HTTPStatus: 400}, action: retry.ActionRetry, rule: "retriable-errors"},
		classifyCase{name: "error type names match exactly", outcome: retry.Outcome{ErrorType: "timeouterror"}, action: retry.ActionDeadLetter},
	)
	runClassify(t, seed000Chatbot(), tests)
}

func TestClassifySeed002(t *testing.T) {
	var tests []classifyCase
	for _, msg := range []string{
		"Request timeout after 30000ms", "connect ECONNREFUSED 10.0.0.1:443", "Rate exceeded: throttling",
		"Request was throttled", "status code 429", "network error", "Rate limit reached", "HTTP 500 from agent",
		"got 501", "502 Bad Gateway", "upstream said 503", "504 Gateway Timeout", "getaddrinfo ENOTFOUND agents.internal",
		"Too Many Requests", "The level of configured provisioned throughput for the table was exceeded",
		"Service Unavailable", "Internal Server Error", "socket hang up: connection closed",
	} {
		tests = append(tests, classifyCase{name: "the message " + msg + " is retried", outcome: retry.Outcome{ErrorType: "Error", Message: msg}, action: retry.ActionRetry, rule: "transient-messages"})
	}
	for _, et := range []string{"ProvisionedThroughputExceeded", "Throttling", "Throttled", "ServiceUnavailable", "InternalServerError"} {
		tests = append(tests, classifyCase{name: "the error name " + et + " is retried", outcome: retry.Outcome{ErrorType: et, Message: "x"}, action: retry.ActionRetry, rule: "dynamodb-transient"})
	}
	for _, o := range []retry.Outcome{
		{ErrorType: "ValidationException", Message: "One or more parameter values were invalid: missing key agentId"},
		{ErrorType: "ValidationError", Message: "email is required"},
		{ErrorType: "AccessDeniedException", Message: "User is not authorized to perform dynamodb:PutItem"},
		{ErrorType: "NotFoundError", Message: "agent abc not found"},
		{ErrorType: "PermissionError", Message: "permission denied"},
	} {
		tests = append(tests, classifyCase{name: "the permanent error " + o.ErrorType + " fails at once", outcome: o, action: retry.ActionDeadLetter})
	}
	tests = append(tests, classifyCase{name: "a status number inside a longer number does not match", outcome: retry.Outcome{Message: "took 15000ms"}, action: retry.ActionDeadLetter})
	runClassify(t, seed002Delegation(), tests)
}

func TestClassifySeed001And004(t *testing.T) {
	t.Run("seed 001", func(t *testing.T) {
		runClassify(t, seed001Grading(), []classifyCase{
			{name: "an LLM timeout is retried", outcome: retry.Outcome{ErrorType: "TimeoutError"}, action: retry.ActionRetry, rule: "temporary"},
			{name: "a TemporaryError is retried", outcome: retry.Outcome{ErrorType: "TemporaryError"}, action: retry.ActionRetry, rule: "temporary"},
			{name: "any 5xx is retried", outcome: retry.Outcome{HTTPStatus: 599}, action: retry.ActionRetry, rule: "temporary"},
			{name: "a 429 is retried", outcome: retry.Outcome{HTTPStatus: 429}, action: retry.ActionRetry, rule: "temporary"},
			{name: "a validation error goes to the DLQ", outcome: retry.Outcome{ErrorType: "ValidationError"}, action: retry.ActionDeadLetter, rule: "permanent"},
			{name: "a PermanentError goes to the DLQ", outcome: retry.Outcome{ErrorType: "PermanentError"}, action: retry.ActionDeadLetter, rule: "permanent"},
		})
	})
	t.Run("seed 004", func(t *testing.T) {
		runClassify(t, seed004Generic(), []classifyCase{
			{name: "a throttling exception is retried", outcome: retry.Outcome{ErrorType: "ThrottlingException"}, action: retry.ActionRetry, rule: "transient"},
			{name: "a timed out message is retried", outcome: retry.Outcome{ErrorType: "Exception", Message: "read timed out"}, action: retry.ActionRetry, rule: "transient"},
			{name: "a schema mismatch goes to the error topic", outcome: retry.Outcome{ErrorType: "SchemaMismatchError", Message: "field x missing"}, action: retry.ActionDeadLetter, rule: "permanent"},
			{name: "an unknown exception is permanent", outcome: retry.Outcome{ErrorType: "KeyError", Message: "'entity_id'"}, action: retry.ActionDeadLetter},
		})
	})
}

func TestClassifyTransportErrors(t *testing.T) {
	tests := []struct {
		name      string
		outcome   retry.Outcome
		errorType string
		action    retry.Action
		rule      string
	}{
		{"a transport timeout is a TimeoutError", retry.Outcome{Transport: retry.TransportTimeout, Message: "context deadline exceeded"}, "TimeoutError", retry.ActionRetry, "transient-errors"},
		{"a refused connection is a ConnectionError", retry.Outcome{Transport: retry.TransportConnectionRefused}, "ConnectionError", retry.ActionRetry, "transient-errors"},
		{"a reset connection is a ConnectionError", retry.Outcome{Transport: retry.TransportConnectionReset}, "ConnectionError", retry.ActionRetry, "transient-errors"},
		{"a DNS failure is a ConnectionError", retry.Outcome{Transport: retry.TransportDNS}, "ConnectionError", retry.ActionRetry, "transient-errors"},
		{"a TLS failure is a ConnectionError", retry.Outcome{Transport: retry.TransportTLS}, "ConnectionError", retry.ActionRetry, "transient-errors"},
		{"a transport error overrides a reported error type and ignores the status", retry.Outcome{Transport: retry.TransportTimeout, ErrorType: "ValidationError", HTTPStatus: 400}, "TimeoutError", retry.ActionRetry, "transient-errors"},
		{"an HTTP answer keeps its own error type", retry.Outcome{HTTPStatus: 404, ErrorType: "NotFound"}, "NotFound", retry.ActionDeadLetter, "permanent-http"},
	}
	c := mustCompile(t, designPolicy())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(tc.outcome)
			if got.ErrorType != tc.errorType || got.Action != tc.action || got.Rule != tc.rule {
				t.Errorf("Classify(%+v) = %+v, want type %q action %q rule %q", tc.outcome, got, tc.errorType, tc.action, tc.rule)
			}
		})
	}
	// A transport error whose type no rule names is still matched by message patterns.
	p := seed002Delegation()
	if got := mustCompile(t, p).Classify(retry.Outcome{Transport: retry.TransportConnectionRefused, Message: "dial tcp: connect: ECONNREFUSED"}); got.Action != retry.ActionRetry || got.Rule != "transient-messages" {
		t.Errorf("seed 002 transport error = %+v, want retried by transient-messages", got)
	}
}

func TestClassifyAppliesRulesInOrderWithTheirAttempts(t *testing.T) {
	tests := []struct {
		name        string
		outcome     retry.Outcome
		rule        string
		maxAttempts int32
	}{
		{"a 503 takes the policy's attempts from the first rule", retry.Outcome{HTTPStatus: 503, ErrorType: "TimeoutError"}, "transient-http", 6},
		{"a timeout without a status takes the rule's 3 attempts", retry.Outcome{ErrorType: "TimeoutError"}, "transient-errors", 3},
		{"a message pattern matches case-insensitively", retry.Outcome{Message: "dial: ECONNREFUSED"}, "transient-errors", 3},
		{"the default action takes the policy's attempts", retry.Outcome{HTTPStatus: 418}, "", 6},
	}
	c := mustCompile(t, designPolicy())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Classify(tc.outcome)
			if got.Rule != tc.rule || got.MaxAttempts != tc.maxAttempts {
				t.Errorf("Classify(%+v) = %+v, want rule %q with %d attempts", tc.outcome, got, tc.rule, tc.maxAttempts)
			}
		})
	}
}

// Literal patterns are matched without the regexp engine; they must agree with it exactly.
func TestMessagePatternsMatchLikeRegexp(t *testing.T) {
	tests := []struct {
		name     string
		pattern  string
		messages []string
	}{
		{"a case-insensitive literal matches any casing", `(?i)timeout`, []string{"TimeOut", "read TIMEOUT x", "time out", "timeou", ""}},
		{"a case-sensitive literal matches only its casing", `ECONNREFUSED`, []string{"connect ECONNREFUSED", "econnrefused", "ECONNREFUSE"}},
		{"the Kelvin sign folds to k", `(?i)kafka`, []string{"\u212aafka", "KAFKA", "kafk"}},
		{"the long s folds to s", `(?i)throttles`, []string{"throttle\u017f", "THROTTLES"}},
		{"Greek sigma has three folds", `(?i)σ`, []string{"Σ", "ς", "σ", "s"}},
		{"a quoted literal with metacharacters is literal", `\Qrate.limit(5)\E`, []string{"rate.limit(5)", "ratexlimit(5)"}},
		{"a folded literal ending in an invalid byte never matches it", "(?i)ab\ufffd", []string{"AB\xff", "ab\ufffd", "ab"}},
		{"invalid bytes before a literal do not hide it", `(?i)net`, []string{"\xff\xfeNET", "\xe2NET", "n\xffet"}},
		{"a multi-byte literal is found after a multi-byte rune", `(?i)é`, []string{"café", "CAFÉ", "cafe"}},
		{"a pattern with an alternation still uses regexp", `(?i)time ?out|deadline`, []string{"Time Out", "deadline exceeded", "dead line"}},
		{"an empty pattern matches everything", ``, []string{"", "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			re := regexp.MustCompile(tc.pattern)
			c := mustCompile(t, retry.Policy{
				MaxAttempts: 2,
				Backoff:     retry.Backoff{InitialDelay: time.Second, Multiplier: "2", MaxDelay: time.Second},
				Classification: retry.Classification{Rules: []retry.Rule{
					{Name: "pattern", Action: retry.ActionRetry, MessagePatterns: []string{tc.pattern}},
				}},
			})
			for _, msg := range tc.messages {
				want := re.MatchString(msg)
				if got := c.Classify(retry.Outcome{Message: msg}).Rule == "pattern"; got != want {
					t.Errorf("pattern %q on %q: matched %v, regexp says %v", tc.pattern, msg, got, want)
				}
			}
		})
	}
}
