package retry_test

import (
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

func TestDecide(t *testing.T) {
	s := time.Second
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		policy  retry.Policy
		outcome retry.Outcome
		attempt int32
		now     time.Time
		rng     retry.Rand
		want    retry.Decision
	}{
		{
			name: "a non-retriable outcome is dead-lettered at once", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 422}, attempt: 1, now: t0,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonNonRetriable, Rule: "non-retriable", MaxAttempts: 6},
		},
		{
			name: "an unmatched outcome takes the default action", policy: seed000Chatbot(),
			outcome: retry.Outcome{ErrorType: "KeyError"}, attempt: 1, now: t0,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonNonRetriable, ErrorType: "KeyError", MaxAttempts: 6},
		},
		{
			name: "the first failure is retried after the first window's delay", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 503}, attempt: 1, now: t0, rng: lowRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "retriable-http", MaxAttempts: 6, Delay: 2 * s, Due: t0.Add(2 * s)},
		},
		{
			name: "the fifth failure is retried after up to 33s", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 503}, attempt: 5, now: t0, rng: highRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "retriable-http", MaxAttempts: 6, Delay: 33 * s, Due: t0.Add(33 * s)},
		},
		{
			name: "the sixth failure of six attempts is dead-lettered with max_retries_exceeded", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 503}, attempt: 6, now: t0,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonMaxRetriesExceeded, Rule: "retriable-http", MaxAttempts: 6},
		},
		{
			name: "attempts past the maximum are dead-lettered too", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 503}, attempt: 60, now: t0,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonMaxRetriesExceeded, Rule: "retriable-http", MaxAttempts: 6},
		},
		{
			name: "an attempt below 1 counts as the first", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 503}, attempt: 0, now: t0, rng: lowRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "retriable-http", MaxAttempts: 6, Delay: 2 * s, Due: t0.Add(2 * s)},
		},
		{
			name: "a rule's maxAttempts retries the second failure", policy: designPolicy(),
			outcome: retry.Outcome{Transport: retry.TransportTimeout}, attempt: 2, now: t0, rng: lowRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "transient-errors", ErrorType: "TimeoutError", MaxAttempts: 3, Delay: 4 * s, Due: t0.Add(4 * s)},
		},
		{
			name: "a rule's maxAttempts dead-letters the third failure", policy: designPolicy(),
			outcome: retry.Outcome{Transport: retry.TransportTimeout}, attempt: 3, now: t0,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonMaxRetriesExceeded, Rule: "transient-errors", ErrorType: "TimeoutError", MaxAttempts: 3},
		},
		{
			name: "seed 003 archives give up after their third delivery", policy: seed003DocumentsArchives(),
			outcome: retry.Outcome{ErrorType: "ParseError"}, attempt: 3, now: t0,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonMaxRetriesExceeded, ErrorType: "ParseError", MaxAttempts: 3},
		},
		{
			name: "seed 003 chunks retry their fourth delivery after 60m", policy: seed003DocumentsChunks(),
			outcome: retry.Outcome{ErrorType: "EmbeddingError"}, attempt: 4, now: t0,
			want: retry.Decision{Action: retry.ActionRetry, ErrorType: "EmbeddingError", MaxAttempts: 5, Delay: time.Hour, Due: t0.Add(time.Hour)},
		},
		{
			name: "a drop rule drops", policy: withDropRule(seed000Chatbot()),
			outcome: retry.Outcome{HTTPStatus: 410}, attempt: 1, now: t0,
			want: retry.Decision{Action: retry.ActionDrop, Rule: "gone", MaxAttempts: 6},
		},
		{
			name: "an honoured Retry-After replaces the backoff delay", policy: seed001Grading(),
			outcome: retry.Outcome{HTTPStatus: 429, RetryAfter: 60 * s}, attempt: 1, now: t0, rng: highRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "temporary", MaxAttempts: 4, Delay: 60 * s, Due: t0.Add(60 * s), FromRetryAfter: true},
		},
		{
			name: "an honoured Retry-After is capped at its maxDelay", policy: seed001Grading(),
			outcome: retry.Outcome{HTTPStatus: 429, RetryAfter: time.Hour}, attempt: 1, now: t0,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "temporary", MaxAttempts: 4, Delay: 5 * time.Minute, Due: t0.Add(5 * time.Minute), FromRetryAfter: true},
		},
		{
			name: "an honoured Retry-After waits at most MaxRetryAfter, whatever its maxDelay", policy: withRetryAfter(seed002Delegation(), retry.RetryAfter{Honor: true, MaxDelay: 1<<63 - 1}),
			outcome: retry.Outcome{ErrorType: "Throttling", RetryAfter: 1<<63 - 1}, attempt: 1, now: t0,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "dynamodb-transient", ErrorType: "Throttling", MaxAttempts: 4, Delay: retry.MaxRetryAfter, Due: t0.Add(retry.MaxRetryAfter), FromRetryAfter: true},
		},
		{
			name: "a Retry-After without its own cap is capped at the backoff's maxDelay", policy: withRetryAfter(seed002Delegation(), retry.RetryAfter{Honor: true}),
			outcome: retry.Outcome{ErrorType: "Throttling", RetryAfter: time.Minute}, attempt: 1, now: t0,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "dynamodb-transient", ErrorType: "Throttling", MaxAttempts: 4, Delay: 10 * s, Due: t0.Add(10 * s), FromRetryAfter: true},
		},
		{
			name: "a Retry-After is ignored unless honoured", policy: seed000Chatbot(),
			outcome: retry.Outcome{HTTPStatus: 429, RetryAfter: time.Minute}, attempt: 1, now: t0, rng: lowRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "retriable-http", MaxAttempts: 6, Delay: 2 * s, Due: t0.Add(2 * s)},
		},
		{
			name: "a retry due before the deadline is scheduled", policy: seed001Grading(),
			outcome: retry.Outcome{ErrorType: "TimeoutError"}, attempt: 1, now: t0.Add(20*time.Minute - 2400*time.Millisecond), rng: highRand,
			want: retry.Decision{Action: retry.ActionRetry, Rule: "temporary", MaxAttempts: 4, ErrorType: "TimeoutError", Delay: 2400 * time.Millisecond, Due: t0.Add(20 * time.Minute)},
		},
		{
			name: "a retry due after the deadline is dead-lettered with deadline_exceeded", policy: seed001Grading(),
			outcome: retry.Outcome{ErrorType: "TimeoutError"}, attempt: 1, now: t0.Add(20*time.Minute - 2400*time.Millisecond + 1), rng: highRand,
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonDeadlineExceeded, Rule: "temporary", ErrorType: "TimeoutError", MaxAttempts: 4},
		},
		{
			name: "an honoured Retry-After past the deadline is dead-lettered with deadline_exceeded", policy: seed001Grading(),
			outcome: retry.Outcome{HTTPStatus: 503, RetryAfter: 5 * time.Minute}, attempt: 2, now: t0.Add(16 * time.Minute),
			want: retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonDeadlineExceeded, Rule: "temporary", MaxAttempts: 4},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, tc.policy)
			got := c.Decide(tc.outcome, tc.attempt, t0, tc.now, tc.rng)
			if got != tc.want {
				t.Errorf("Decide = %+v\nwant     %+v", got, tc.want)
			}
		})
	}
}

func withDropRule(p retry.Policy) retry.Policy {
	p.Classification.Rules = append([]retry.Rule{{Name: "gone", Action: retry.ActionDrop, HTTPStatuses: []string{"410"}}}, p.Classification.Rules...)
	return p
}

func withRetryAfter(p retry.Policy, ra retry.RetryAfter) retry.Policy {
	p.RetryAfter = ra
	return p
}

func TestDecideSamplesEveryRetryInsideItsWindow(t *testing.T) {
	c := mustCompile(t, seed004Generic())
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rng := newSeededRand(3)
	for attempt := int32(1); attempt < 3; attempt++ {
		w, _ := c.Window(attempt)
		for range 1000 {
			d := c.Decide(retry.Outcome{ErrorType: "TimeoutError"}, attempt, t0, t0, rng)
			if d.Action != retry.ActionRetry || d.Delay < w.Earliest || d.Delay > w.Latest || !d.Due.Equal(t0.Add(d.Delay)) {
				t.Fatalf("attempt %d: %+v outside %+v", attempt, d, w)
			}
		}
	}
}

func TestExpired(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		policy retry.Policy
		age    time.Duration
		want   bool
	}{
		{"a record younger than the deadline is delivered", seed001Grading(), 19 * time.Minute, false},
		{"a record exactly as old as the deadline is delivered", seed001Grading(), 20 * time.Minute, false},
		{"a record older than the deadline is dead-lettered before delivery", seed001Grading(), 20*time.Minute + 1, true},
		{"without a deadline a record never expires", seed000Chatbot(), 1000 * time.Hour, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustCompile(t, tc.policy)
			if got := c.Expired(t0, t0.Add(tc.age)); got != tc.want {
				t.Errorf("Expired at age %v = %v, want %v", tc.age, got, tc.want)
			}
		})
	}
}

func TestClassifyAndDecideDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool, which regexp uses, drop items: allocation counts are meaningless")
	}
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	rng := newSeededRand(1)
	for name, p := range map[string]retry.Policy{"seed 000": seed000Chatbot(), "seed 001": seed001Grading(), "seed 002": seed002Delegation(), "design example": designPolicy()} {
		c := mustCompile(t, p)
		outcomes := []retry.Outcome{
			{HTTPStatus: 503},
			{ErrorType: "Error", Message: "connect ECONNREFUSED 10.0.0.1:443 after a long and winding message"},
			{ErrorType: "ValidationError", Message: "email is required"},
			{Transport: retry.TransportTimeout, Message: "context deadline exceeded"},
		}
		for _, o := range outcomes {
			if a := testing.AllocsPerRun(100, func() { _ = c.Classify(o) }); a != 0 {
				t.Errorf("%s: Classify(%+v) allocates %v times", name, o, a)
			}
			if a := testing.AllocsPerRun(100, func() { _ = c.Decide(o, 2, t0, t0, rng) }); a != 0 {
				t.Errorf("%s: Decide(%+v) allocates %v times", name, o, a)
			}
		}
	}
}
