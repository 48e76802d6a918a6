package retryloop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

type ValidationError struct{ Field string }

func (v *ValidationError) Error() string { return "invalid " + v.Field }

type TimeoutError struct{}

func (TimeoutError) Error() string { return "upstream timed out" }

type quotaError struct{}

func (quotaError) Error() string     { return "quota exhausted" }
func (quotaError) ErrorType() string { return "RateLimitExceeded" }

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&ValidationError{}, "ValidationError"},
		{fmt.Errorf("saving: %w", &ValidationError{}), "ValidationError"},
		{retryloop.Permanent(fmt.Errorf("a: %w", TimeoutError{})), "TimeoutError"},
		{quotaError{}, "RateLimitExceeded"},
		{fmt.Errorf("x: %w", quotaError{}), "RateLimitExceeded"},
		{errors.New("plain"), ""},
		{fmt.Errorf("wrapped %w", errors.New("plain")), ""},
		{context.Canceled, ""},
	} {
		if got := retryloop.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestLibraryMode: a user's handler returning Transient, Permanent, typed, HTTP-status, Retry-After
// and undeliverable errors (and panicking) goes through the same retry and dead-letter path as the
// dispatcher's HTTP sink, configured from the same file and environment variables.
func TestLibraryMode(t *testing.T) {
	const group = "library"
	src, dlq := "orders", "orders.dlq"
	pol := &policy.Spec{
		MaxAttempts: 3,
		Backoff:     policy.Backoff{InitialDelay: dt.D(50 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient-http", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"429", "500-599"}},
			{Name: "timeouts", Action: policy.ActionRetry, ErrorTypes: []string{"TimeoutError"}},
		}},
		RetryAfter: &policy.RetryAfter{Mode: policy.RetryAfterHonor, MaxDelay: dt.PD(time.Second)},
	}
	c := dt.Cluster(t, map[string]int32{src: 2, src + ".retry.1": 2, src + ".retry.2": 2, dlq: 1})

	// The operator's rendering: a file for the policy and the pipeline, env vars for the rest.
	file := config.Config{Pipeline: config.Pipeline{Namespace: "shop", Name: "orders"}, Policy: pol,
		Group:  config.GroupSettings{SessionTimeout: dt.PD(3 * time.Second), HeartbeatInterval: dt.PD(300 * time.Millisecond)},
		Listen: config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled}}
	data, _ := json.Marshal(file)
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		config.EnvConfig:           path,
		config.EnvBootstrapServers: strings.Join(c.ListenAddrs(), ","),
		config.EnvTopicPrimary:     src,
		config.EnvTopicRetry:       src + ".retry.1," + src + ".retry.2",
		config.EnvTopicDLQ:         dlq,
		config.EnvConsumerGroup:    group,
	}
	cfg, err := retryloop.LoadConfig("", func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	seen := map[string][]retryloop.DeliveryInfo{}
	topics := map[string]bool{}
	loop, err := retryloop.New(cfg, func(ctx context.Context, r *kgo.Record) error {
		info, ok := retryloop.Info(ctx)
		if !ok {
			return errors.New("no delivery info")
		}
		mu.Lock()
		seen[string(r.Value)] = append(seen[string(r.Value)], info)
		topics[r.Topic] = true
		for _, h := range r.Headers {
			if headers.IsOwned(h.Key) {
				t.Errorf("the handler sees header %s", h.Key)
			}
		}
		mu.Unlock()
		switch string(r.Value) {
		case "transient":
			if info.Attempt == 1 {
				return retryloop.Transient(errors.New("flaky dependency"))
			}
		case "permanent":
			return retryloop.Permanent(fmt.Errorf("order 7: %w", &ValidationError{Field: "sku"}))
		case "typed":
			return fmt.Errorf("calling inventory: %w", TimeoutError{})
		case "status":
			if info.Attempt == 1 {
				return retryloop.HTTPStatus(503, errors.New("inventory unavailable"))
			}
		case "retry-after":
			if info.Attempt == 1 {
				return retryloop.RetryAfter(300*time.Millisecond, retryloop.Transient(errors.New("throttled")))
			}
		case "undeliverable":
			return retryloop.Undeliverable(errors.New("cannot decode protobuf"))
		case "unclassified":
			return errors.New("boom")
		case "panic":
			panic("nil map")
		}
		return nil
	}, retryloop.WithoutHTTP())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	prod := dt.Client(t, c)
	values := []string{"ok", "transient", "permanent", "typed", "status", "retry-after", "undeliverable", "unclassified", "panic"}
	for _, v := range values {
		dt.Produce(t, prod, &kgo.Record{Topic: src, Key: []byte(v), Value: []byte(v)})
	}
	want := map[string]struct {
		reason, errType string
		attempts        string
	}{
		"permanent":     {headers.ReasonNonRetriable, "ValidationError", "1"},
		"typed":         {headers.ReasonMaxRetriesExceeded, "TimeoutError", "3"},
		"undeliverable": {headers.ReasonUndeliverable, "Undeliverable", "1"},
		"unclassified":  {headers.ReasonNonRetriable, "", "1"},
		"panic":         {headers.ReasonNonRetriable, "Panic", "1"},
	}
	dl := dt.ReadTopic(t, c, dlq, len(want), 20*time.Second)
	if len(dl) != len(want) {
		t.Fatalf("dead letters: %d, want %d", len(dl), len(want))
	}
	for _, r := range dl {
		w := want[string(r.Key)]
		reason, _ := dt.Header(r, headers.Reason)
		et, _ := dt.Header(r, headers.ErrorType)
		attempts, _ := dt.Header(r, headers.Attempts)
		pipeline, _ := dt.Header(r, headers.Pipeline)
		if reason != w.reason || et != w.errType || attempts != w.attempts || pipeline != "shop/orders" {
			t.Errorf("%s: reason %q type %q attempts %q pipeline %q, want %+v", r.Key, reason, et, attempts, pipeline, w)
		}
	}
	dt.Eventually(t, 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen["transient"]) == 2 && len(seen["status"]) == 2 && len(seen["retry-after"]) == 2
	}, "the retried records delivered again")
	mu.Lock()
	defer mu.Unlock()
	for _, v := range []string{"transient", "status", "retry-after"} {
		s := seen[v]
		if s[1].Attempt != 2 || s[0].IdempotencyKey != s[1].IdempotencyKey || s[1].FirstFailure.IsZero() {
			t.Errorf("%s: deliveries %+v", v, s)
		}
	}
	if n := len(seen["ok"]); n != 1 {
		t.Errorf("ok delivered %d times", n)
	}
	if len(topics) != 1 || !topics[src] {
		t.Errorf("the handler saw topics %v, want only the original %s", topics, src)
	}
}
