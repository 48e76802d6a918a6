package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TestErrorClassification proves the classifier on raw causes and on the
// package's own *Error, and that sentinels work with errors.Is.
func TestErrorClassification(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		kind Kind
	}{
		{"sasl code", fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), KindAuth},
		{"topic acl", kerr.TopicAuthorizationFailed, KindAuth},
		{"cluster acl", kerr.ClusterAuthorizationFailed, KindAuth},
		{"group acl", kerr.GroupAuthorizationFailed, KindAuth},
		{"kadm auth", &kadm.AuthError{Err: kerr.TopicAuthorizationFailed}, KindAuth},
		{"dial refused", fmt.Errorf("unable to dial: %w", dial), KindUnreachable},
		{"dns", &net.DNSError{Err: "no such host", Name: "kafka.invalid", IsNotFound: true}, KindUnreachable},
		{"deadline", context.DeadlineExceeded, KindUnreachable},
		{"eof", io.EOF, KindUnreachable},
		{"exists", kerr.TopicAlreadyExists, KindTopicExists},
		{"unknown topic", kerr.UnknownTopicOrPartition, KindTopicNotFound},
		{"invalid config", kerr.InvalidConfig, KindOther},
		{"canceled", context.Canceled, KindOther},
		{"sentinel auth", ErrAuth, KindAuth},
		{"sentinel unreachable", fmt.Errorf("wrapped: %w", ErrUnreachable), KindUnreachable},
		{"sentinel exists", ErrTopicExists, KindTopicExists},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := KindOf(tc.err); got != tc.kind {
				t.Errorf("KindOf = %v, want %v", got, tc.kind)
			}
			if IsAuthError(tc.err) != (tc.kind == KindAuth) {
				t.Errorf("IsAuthError = %v", IsAuthError(tc.err))
			}
			if IsUnreachable(tc.err) != (tc.kind == KindUnreachable) {
				t.Errorf("IsUnreachable = %v", IsUnreachable(tc.err))
			}
			// Wrapped by the package: same kind, sentinel matches, code kept.
			e := newError("op", KindOther, tc.err, "")
			if e.Kind != tc.kind || KindOf(e) != tc.kind {
				t.Errorf("newError kind = %v, want %v", e.Kind, tc.kind)
			}
			if !errors.Is(e, tc.err) {
				t.Errorf("newError does not unwrap to the cause")
			}
			var ke *kerr.Error
			if errors.As(tc.err, &ke) && (e.Code != ke.Message || !strings.Contains(e.Error(), ke.Message)) {
				t.Errorf("code %q lost: Code=%q msg=%q", ke.Message, e.Code, e.Error())
			}
		})
	}
	if IsAuthError(nil) || IsUnreachable(nil) || IsTLSError(nil) {
		t.Error("nil classified as a failure")
	}
	e := newError("login", KindOther, fmt.Errorf("%w: server said bad password p4ss-w0rd!", kerr.SaslAuthenticationFailed), "p4ss-w0rd!")
	if strings.Contains(e.Error(), "p4ss-w0rd!") || !strings.Contains(e.Error(), redacted) {
		t.Errorf("secret not scrubbed: %q", e.Error())
	}
	if !errors.Is(e, ErrAuth) || errors.Is(e, ErrUnreachable) || errors.Is(e, ErrTopicExists) {
		t.Errorf("sentinel matching wrong for %v", e)
	}
}
