package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

// TestKindOf proves the classification of the package's own errors, its
// sentinels and standard library causes, without any client library.
func TestKindOf(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, tc := range []struct {
		name string
		err  error
		kind Kind
	}{
		{"dial refused", fmt.Errorf("unable to dial: %w", dial), KindUnreachable},
		{"dns", &net.DNSError{Err: "no such host", Name: "kafka.invalid", IsNotFound: true}, KindUnreachable},
		{"deadline", context.DeadlineExceeded, KindUnreachable},
		{"eof", io.EOF, KindUnreachable},
		{"canceled", context.Canceled, KindOther},
		{"anything else", errors.New("INVALID_CONFIG"), KindOther},
		{"sentinel auth", ErrAuth, KindAuth},
		{"sentinel unreachable", fmt.Errorf("wrapped: %w", ErrUnreachable), KindUnreachable},
		{"sentinel exists", ErrTopicExists, KindTopicExists},
		{"sentinel TLS", ErrTLS, KindTLS},
		{"an Error's own kind", NewError("ping", KindAuth, errors.New("SASL_AUTHENTICATION_FAILED"), ""), KindAuth},
		{"an Error classified from its cause", NewError("ping", KindOther, dial, ""), KindUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.err); got != tc.kind {
				t.Errorf("KindOf = %v, want %v", got, tc.kind)
			}
			if IsAuthError(tc.err) != (tc.kind == KindAuth) || IsUnreachable(tc.err) != (tc.kind == KindUnreachable) ||
				IsTLSError(tc.err) != (tc.kind == KindTLS) {
				t.Errorf("Is* disagree with the kind %v", tc.kind)
			}
		})
	}
	if IsAuthError(nil) || IsUnreachable(nil) || IsTLSError(nil) || IsRetriable(nil) || CodeOf(nil) != "" {
		t.Error("nil classified as a failure")
	}
	closed := NewError("ping", KindClosed, errors.New("client closed"), "")
	if !errors.Is(closed, ErrClosed) || closed.Error() != "kafka ping: kafka: admin client closed: client closed" {
		t.Errorf("closed: %q", closed.Error())
	}
	coded := NewError("create topic \"t\"", KindOther, errors.New("NOT_CONTROLLER: retry"), "pass-word").WithCode("NOT_CONTROLLER", true)
	if CodeOf(fmt.Errorf("reconcile: %w", coded)) != "NOT_CONTROLLER" || !IsRetriable(coded) {
		t.Errorf("code lost: %+v", coded)
	}
}
