package retryloop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/retryloop"
)

// Permanent dead-letters the record at once, whatever the policy's rules say: a record that cannot
// be decoded will not decode on a retry. The error keeps its message (the dead letter's
// retryops.error.message) and its chain.
func ExamplePermanent() {
	handler := func(_ context.Context, r *kgo.Record) error {
		var order struct {
			SKU string `json:"sku"`
		}
		if err := json.Unmarshal(r.Value, &order); err != nil {
			return retryloop.Permanent(fmt.Errorf("decoding order %s: %w", r.Key, err))
		}
		return nil
	}
	err := handler(context.Background(), &kgo.Record{Key: []byte("order-7"), Value: []byte("{sku")})
	var syntax *json.SyntaxError
	fmt.Println(err)
	fmt.Println("a *json.SyntaxError:", errors.As(err, &syntax), "- error type:", retryloop.ErrorType(err))
	// Output:
	// decoding order order-7: invalid character 's' looking for beginning of object key string
	// a *json.SyntaxError: true - error type: SyntaxError
}

// errLocked stands for a failure the policy's rules would dead-letter but the handler knows to be
// passing.
var errLocked = errors.New("row locked by another writer")

// Transient retries the record (within the policy's maxAttempts and deadline) whatever the
// classification says.
func ExampleTransient() {
	handler := func(_ context.Context, _ *kgo.Record) error {
		return retryloop.Transient(fmt.Errorf("saving order: %w", errLocked))
	}
	err := handler(context.Background(), &kgo.Record{})
	fmt.Println(err)
	fmt.Println("still errLocked:", errors.Is(err, errLocked))
	// Output:
	// saving order: row locked by another writer
	// still errLocked: true
}

// A handler that calls an HTTP service passes the answer's status on, so that the policy's
// httpStatuses rules ("429", "500-599") classify it as they would the dispatcher's sink.
func ExampleHTTPStatus() {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer svc.Close()

	handler := func(ctx context.Context, r *kgo.Record) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.URL, bytes.NewReader(r.Value))
		if err != nil {
			return retryloop.Permanent(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // no answer: classified by the error's type and message
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode >= 300 {
			return retryloop.HTTPStatus(resp.StatusCode, fmt.Errorf("embedding service: %s", resp.Status))
		}
		return nil
	}
	fmt.Println(handler(context.Background(), &kgo.Record{}))
	// Output:
	// embedding service: 503 Service Unavailable
}

// RetryAfter passes on how long a service asked to be left alone: the next attempt comes no sooner
// (up to the policy's retryAfter.maxDelay, unless the policy ignores Retry-After). The error is
// still classified, here by its HTTP status.
func ExampleRetryAfter() {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "30")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	}))
	defer svc.Close()

	handler := func(ctx context.Context, r *kgo.Record) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, svc.URL, bytes.NewReader(r.Value))
		if err != nil {
			return retryloop.Permanent(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode >= 300 {
			err := retryloop.HTTPStatus(resp.StatusCode, fmt.Errorf("embedding service: %s", resp.Status))
			if s, perr := strconv.Atoi(resp.Header.Get("Retry-After")); perr == nil {
				err = retryloop.RetryAfter(time.Duration(s)*time.Second, err)
			}
			return err
		}
		return nil
	}
	fmt.Println(handler(context.Background(), &kgo.Record{}))
	// Output:
	// embedding service: 429 Too Many Requests
}

// Undeliverable is for a record that is broken rather than a failure of its processing: it is
// dead-lettered at once with reason undeliverable and error type Undeliverable.
func ExampleUndeliverable() {
	handler := func(_ context.Context, r *kgo.Record) error {
		if len(r.Value) == 0 {
			return retryloop.Undeliverable(errors.New("empty record"))
		}
		return nil
	}
	fmt.Println(handler(context.Background(), &kgo.Record{}))
	// Output:
	// empty record
}

// ArchiveError names its own error type for the policy's errorTypes rules.
type ArchiveError struct{ Name string }

func (e *ArchiveError) Error() string     { return "cannot unpack " + e.Name }
func (e *ArchiveError) ErrorType() string { return "ArchiveProcessingError" }

// SchemaError is named by its Go type.
type SchemaError struct{ Field string }

func (e SchemaError) Error() string { return "missing field " + e.Field }

// ErrorType is the name a policy's errorTypes rules match: an ErrorType() method's answer, else
// the Go type's name, looked for through wrapping; a plain errors.New error has none (its message
// is still matched by messagePatterns).
func ExampleErrorType() {
	for _, err := range []error{
		fmt.Errorf("document 12: %w", &ArchiveError{Name: "q3.zip"}),
		retryloop.Permanent(SchemaError{Field: "text"}),
		errors.New("embedding service unavailable"),
	} {
		fmt.Printf("%q: %q\n", err, retryloop.ErrorType(err))
	}
	// Output:
	// "document 12: cannot unpack q3.zip": "ArchiveProcessingError"
	// "missing field text": "SchemaError"
	// "embedding service unavailable": ""
}
