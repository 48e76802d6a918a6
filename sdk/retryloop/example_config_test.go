package retryloop_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retry"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// StaleIndexError names its own error type for the policy's errorTypes rules.
type StaleIndexError struct{}

func (StaleIndexError) Error() string     { return "index is being rebuilt" }
func (StaleIndexError) ErrorType() string { return "StaleIndex" }

// A configuration built in Go, for a consumer the operator does not run (a test, a job): the
// policy is a RetryPolicy's spec, classification rules included. Default derives the retry tiers
// from the policy; the retry core shows what the rules make of a handler's errors.
func ExampleConfig() {
	cfg := &retryloop.Config{
		Pipeline: config.Pipeline{Namespace: "search", Name: "documents"},
		Kafka:    config.Kafka{BootstrapServers: []string{"kafka:9092"}},
		Topics:   config.Topics{Source: "documents.chunks", DeadLetter: "documents.dlq"},
		Policy: &policy.Spec{
			MaxAttempts: 4,
			Backoff:     policy.Backoff{InitialDelay: policy.D(time.Second), Multiplier: "2", MaxDelay: policy.D(time.Minute)},
			Classification: &policy.Classification{
				DefaultAction: "DeadLetter",
				Rules: []policy.ClassificationRule{
					{Name: "overloaded", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"429", "500-599"}},
					{Name: "stale-index", Action: policy.ActionRetry, ErrorTypes: []string{"StaleIndex"}, MaxAttempts: ptr(int32(2))},
					{Name: "quota", Action: policy.ActionRetry, MessagePatterns: []string{`quota (exceeded|exhausted)`}},
				},
			},
		},
	}
	cfg.Default()
	if err := cfg.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("group:", cfg.ConsumerGroup)
	fmt.Println("tiers:", cfg.Topics.Retries.Names())

	compiled, err := retry.Compile(policy.FromSpec(*cfg.Policy))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range []struct {
		status int
		err    error
	}{
		{503, errors.New("embedding service: 503 Service Unavailable")}, // retryloop.HTTPStatus(503, err)
		{0, fmt.Errorf("searching: %w", StaleIndexError{})},
		{0, errors.New("embedding quota exceeded")},
		{0, errors.New("document has no text")},
	} {
		got := compiled.Classify(retry.Outcome{HTTPStatus: c.status, ErrorType: retryloop.ErrorType(c.err), Message: c.err.Error()})
		fmt.Printf("%q: %s (rule %q, %d attempts)\n", c.err, got.Action, got.Rule, got.MaxAttempts)
	}
	// Output:
	// group: search.documents
	// tiers: [documents.chunks.retry.1 documents.chunks.retry.2 documents.chunks.retry.3]
	// "embedding service: 503 Service Unavailable": Retry (rule "overloaded", 4 attempts)
	// "searching: index is being rebuilt": Retry (rule "stale-index", 2 attempts)
	// "embedding quota exceeded": Retry (rule "quota", 4 attempts)
	// "document has no text": DeadLetter (rule "", 4 attempts)
}

func ptr[T any](v T) *T { return &v }
