package retry_test

import (
	"testing"
	"time"

	"github.com/retryops/retry-operator/sdk/retry"
)

func BenchmarkClassify(b *testing.B) {
	cases := []struct {
		name    string
		policy  retry.Policy
		outcome retry.Outcome
	}{
		{"seed 000 HTTP status", seed000Chatbot(), retry.Outcome{HTTPStatus: 503}},
		{"seed 000 error type", seed000Chatbot(), retry.Outcome{ErrorType: "BusinessLogicError"}},
		{"seed 002 error name", seed002Delegation(), retry.Outcome{ErrorType: "Throttled", Message: "Rate exceeded"}},
		{"seed 002 last message pattern", seed002Delegation(), retry.Outcome{ErrorType: "Error", Message: "upstream returned an Internal Server Error while creating the conversation"}},
		{"seed 002 no match through every pattern", seed002Delegation(), retry.Outcome{ErrorType: "ValidationException", Message: "One or more parameter values were invalid: missing the key agentId in the item"}},
		{"design transport error", designPolicy(), retry.Outcome{Transport: retry.TransportConnectionRefused, Message: "dial tcp 10.0.0.1:8080: connect: connection refused"}},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			c := mustCompile(b, bc.policy)
			b.ReportAllocs()
			for b.Loop() {
				_ = c.Classify(bc.outcome)
			}
		})
	}
}

func BenchmarkDecide(b *testing.B) {
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		name    string
		policy  retry.Policy
		outcome retry.Outcome
		attempt int32
	}{
		{"seed 000 retry with additive jitter", seed000Chatbot(), retry.Outcome{HTTPStatus: 503}, 3},
		{"seed 001 retry with deadline and proportional jitter", seed001Grading(), retry.Outcome{ErrorType: "TimeoutError"}, 2},
		{"seed 001 honoured Retry-After", seed001Grading(), retry.Outcome{HTTPStatus: 429, RetryAfter: 10 * time.Second}, 2},
		{"seed 002 message pattern retry", seed002Delegation(), retry.Outcome{Message: "connect ECONNREFUSED 10.0.0.1:443"}, 1},
		{"seed 000 max retries exceeded", seed000Chatbot(), retry.Outcome{HTTPStatus: 503}, 6},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			c := mustCompile(b, bc.policy)
			rng := newSeededRand(1)
			b.ReportAllocs()
			for b.Loop() {
				_ = c.Decide(bc.outcome, bc.attempt, t0, t0, rng)
			}
		})
	}
}

func BenchmarkBreaker(b *testing.B) {
	br, err := retry.NewBreaker(*seed001Breaker(), newFakeClock())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if br.Allow() {
			br.Record(i%4 != 0)
		}
		i++
	}
}
