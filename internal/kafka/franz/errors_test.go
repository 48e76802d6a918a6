package franz

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

	"github.com/retryops/retry-operator/internal/kafka"
)

// TestErrorClassification proves the classifier on raw causes and on the
// *kafka.Error newError makes of them, and that sentinels work with errors.Is.
func TestErrorClassification(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name string
		err  error
		kind kafka.Kind
	}{
		{"sasl code", fmt.Errorf("x: %w", kerr.SaslAuthenticationFailed), kafka.KindAuth},
		{"topic acl", kerr.TopicAuthorizationFailed, kafka.KindAuth},
		{"cluster acl", kerr.ClusterAuthorizationFailed, kafka.KindAuth},
		{"group acl", kerr.GroupAuthorizationFailed, kafka.KindAuth},
		{"kadm auth", &kadm.AuthError{Err: kerr.TopicAuthorizationFailed}, kafka.KindAuth},
		{"dial refused", fmt.Errorf("unable to dial: %w", dial), kafka.KindUnreachable},
		{"dns", &net.DNSError{Err: "no such host", Name: "kafka.invalid", IsNotFound: true}, kafka.KindUnreachable},
		{"deadline", context.DeadlineExceeded, kafka.KindUnreachable},
		{"eof", io.EOF, kafka.KindUnreachable},
		{"exists", kerr.TopicAlreadyExists, kafka.KindTopicExists},
		{"unknown topic", kerr.UnknownTopicOrPartition, kafka.KindTopicNotFound},
		{"invalid config", kerr.InvalidConfig, kafka.KindOther},
		{"canceled", context.Canceled, kafka.KindOther},
		{"sentinel auth", kafka.ErrAuth, kafka.KindAuth},
		{"sentinel unreachable", fmt.Errorf("wrapped: %w", kafka.ErrUnreachable), kafka.KindUnreachable},
		{"sentinel exists", kafka.ErrTopicExists, kafka.KindTopicExists},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := classify(tc.err); got != tc.kind {
				t.Errorf("classify = %v, want %v", got, tc.kind)
			}
			// Wrapped by the package: same kind, sentinel matches, code kept.
			e := newError("op", kafka.KindOther, tc.err, "")
			if e.Kind != tc.kind || kafka.KindOf(e) != tc.kind {
				t.Errorf("newError kind = %v, want %v", e.Kind, tc.kind)
			}
			if kafka.IsAuthError(e) != (tc.kind == kafka.KindAuth) {
				t.Errorf("IsAuthError = %v", kafka.IsAuthError(e))
			}
			if kafka.IsUnreachable(e) != (tc.kind == kafka.KindUnreachable) {
				t.Errorf("IsUnreachable = %v", kafka.IsUnreachable(e))
			}
			if !errors.Is(e, tc.err) {
				t.Errorf("newError does not unwrap to the cause")
			}
			var ke *kerr.Error
			if errors.As(tc.err, &ke) && (e.Code != ke.Message || kafka.CodeOf(e) != ke.Message || e.Retriable != ke.Retriable ||
				!strings.Contains(e.Error(), ke.Message)) {
				t.Errorf("code %q lost: Code=%q msg=%q", ke.Message, e.Code, e.Error())
			}
		})
	}
	if !kafka.IsRetriable(newError("create", kafka.KindOther, kerr.NotController, "")) || kafka.IsRetriable(newError("create", kafka.KindOther, kerr.InvalidConfig, "")) {
		t.Error("retriable codes not told apart")
	}
	e := newError("login", kafka.KindOther, fmt.Errorf("%w: server said bad password p4ss-w0rd!", kerr.SaslAuthenticationFailed), "p4ss-w0rd!")
	if strings.Contains(e.Error(), "p4ss-w0rd!") || !strings.Contains(e.Error(), "<redacted>") {
		t.Errorf("secret not scrubbed: %q", e.Error())
	}
	if !errors.Is(e, kafka.ErrAuth) || errors.Is(e, kafka.ErrUnreachable) || errors.Is(e, kafka.ErrTopicExists) {
		t.Errorf("sentinel matching wrong for %v", e)
	}
}
