package retryloop

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Permanent marks err as not worth retrying: the record is dead-lettered at once with reason
// non_retriable_error, whatever the policy's classification says.
func Permanent(err error) error { return &classified{err: err, force: retry.ActionDeadLetter} }

// Transient marks err as worth retrying: the record is retried (within the policy's maxAttempts and
// deadline) whatever the classification says.
func Transient(err error) error { return &classified{err: err, force: retry.ActionRetry} }

// HTTPStatus attaches an HTTP status code to err, for the policy's httpStatuses rules (a handler
// calling an HTTP service can pass its answer on).
func HTTPStatus(code int, err error) error { return &classified{err: err, status: code} }

// RetryAfter asks for the next attempt no sooner than d (honoured up to the policy's
// retryAfter.maxDelay unless the policy ignores Retry-After). The error is still classified.
func RetryAfter(d time.Duration, err error) error { return &classified{err: err, retryAfter: d} }

// Undeliverable marks the record itself as unprocessable (it cannot be decoded, say): it is
// dead-lettered at once with reason undeliverable.
func Undeliverable(err error) error { return &classified{err: err, undeliverable: true} }

// classified wraps an error with classification hints; wrappers nest, the outermost setting of
// each hint wins.
type classified struct {
	err           error
	force         retry.Action
	status        int
	retryAfter    time.Duration
	undeliverable bool
}

func (c *classified) Error() string {
	if c.err == nil {
		return "<nil>"
	}
	return c.err.Error()
}

func (c *classified) Unwrap() error { return c.err }

// errorTyper is implemented by errors that name their own type for classification.
type errorTyper interface{ ErrorType() string }

// ErrorType is the error type name the classification's errorTypes match for err: the first error
// in its chain with an ErrorType() string method, else the Go type name (without package or
// pointer) of the first error that is not one of this package's or fmt's wrappers; "" for a plain
// errors.New error.
func ErrorType(err error) string {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if t, ok := e.(errorTyper); ok {
			return t.ErrorType()
		}
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if _, ok := e.(*classified); ok { //nolint:errorlint // the loop walks the chain itself, one link at a time
			continue
		}
		t := reflect.TypeOf(e)
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.PkgPath() == "fmt" && (t.Name() == "wrapError" || t.Name() == "wrapErrors"):
			continue
		case t.PkgPath() == "errors" && t.Name() == "errorString":
			return ""
		}
		return t.Name()
	}
	return ""
}

// result turns a handler's error into the dispatcher's Result.
func result(ctx context.Context, err error) dispatcher.Result {
	if err == nil {
		return dispatcher.Result{Success: true}
	}
	res := dispatcher.Result{Outcome: retry.Outcome{Message: err.Error(), ErrorType: ErrorType(err)}}
	var forced, status, ra, undeliverable bool
	for e := err; e != nil; e = errors.Unwrap(e) {
		c, ok := e.(*classified) //nolint:errorlint // the loop walks the chain itself, one link at a time
		if !ok {
			continue
		}
		if c.force != "" && !forced {
			res.Force, forced = c.force, true
		}
		if c.status != 0 && !status {
			res.Outcome.HTTPStatus, status = c.status, true
		}
		if c.retryAfter > 0 && !ra {
			res.Outcome.RetryAfter, ra = c.retryAfter, true
		}
		if c.undeliverable && !undeliverable {
			res.Undeliverable, undeliverable = true, true
		}
	}
	if !status && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == context.DeadlineExceeded {
		// The attempt ran out of its attemptTimeout: a TimeoutError, as for the HTTP sink.
		res.Outcome.Transport = retry.TransportTimeout
	}
	return res
}
