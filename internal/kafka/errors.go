package kafka

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Kind classifies an Error.
type Kind int

const (
	// KindOther is any failure not covered by a more specific kind, for
	// example a broker error code such as INVALID_CONFIG.
	KindOther Kind = iota
	// KindAuth is an authentication or authorization failure: SASL
	// credentials rejected, or a topic/cluster/group ACL denying the
	// operation. Retrying without changing credentials or ACLs will not
	// help.
	KindAuth
	// KindUnreachable is a connectivity failure: the broker could not be
	// dialed (refused, no route, DNS), the connection broke, or the call
	// did not complete within the request timeout.
	KindUnreachable
	// KindTLS is a TLS handshake or certificate verification failure, or a
	// TLS/plaintext mismatch between client and broker.
	KindTLS
	// KindTopicExists means CreateTopic found the topic already present.
	KindTopicExists
	// KindTopicNotFound means the operation named a topic that does not
	// exist.
	KindTopicNotFound
	// KindClosed means the admin client was closed (evicted by the
	// Factory or the Factory was closed); obtain a new one from
	// Factory.Admin.
	KindClosed
)

// String returns the kind name.
func (k Kind) String() string {
	switch k {
	case KindAuth:
		return "auth"
	case KindUnreachable:
		return "unreachable"
	case KindTLS:
		return "tls"
	case KindTopicExists:
		return "topic-exists"
	case KindTopicNotFound:
		return "topic-not-found"
	case KindClosed:
		return "closed"
	default:
		return "other"
	}
}

// Sentinel errors. Every *Error of the matching Kind satisfies errors.Is
// against these, and tests (or fakes) may return them directly.
var (
	// ErrTopicExists is matched by errors from CreateTopic when the topic
	// already exists.
	ErrTopicExists = errors.New("kafka: topic already exists")
	// ErrTopicNotFound is matched by errors for operations on a topic
	// that does not exist.
	ErrTopicNotFound = errors.New("kafka: topic not found")
	// ErrAuth is matched by authentication and authorization failures;
	// IsAuthError is the preferred check.
	ErrAuth = errors.New("kafka: authentication or authorization failed")
	// ErrUnreachable is matched by connectivity failures and timeouts;
	// IsUnreachable is the preferred check.
	ErrUnreachable = errors.New("kafka: broker unreachable")
	// ErrTLS is matched by TLS failures.
	ErrTLS = errors.New("kafka: TLS failure")
	// ErrClosed is matched by calls on an admin that was closed.
	ErrClosed = errors.New("kafka: admin client closed")
)

// Error is the error type returned by every Admin method. Its message has the
// form "kafka <op>: <cause>", where the cause keeps the broker error code
// name when there is one (for example "SASL_AUTHENTICATION_FAILED: ...").
// The message never contains the SASL password.
type Error struct {
	// Op is the operation that failed, for example "create topic \"dlq\"".
	Op string
	// Kind classifies the failure.
	Kind Kind
	// Code is the Kafka error code name (for example
	// "TOPIC_AUTHORIZATION_FAILED") when the failure carries one, else "".
	Code string

	msg string
	err error
}

// Error returns the (secret-free) message.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the underlying cause, so errors.Is(err, kerr.X) and
// errors.As(err, **kerr.Error) keep working.
func (e *Error) Unwrap() error { return e.err }

// Is matches the package sentinels by Kind.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrTopicExists:
		return e.Kind == KindTopicExists
	case ErrTopicNotFound:
		return e.Kind == KindTopicNotFound
	case ErrAuth:
		return e.Kind == KindAuth
	case ErrUnreachable:
		return e.Kind == KindUnreachable
	case ErrTLS:
		return e.Kind == KindTLS
	case ErrClosed:
		return e.Kind == KindClosed
	}
	return false
}

// IsAuthError reports whether err is an authentication or authorization
// failure: SASL credentials rejected, SASL required but not configured, or
// TOPIC/CLUSTER/GROUP_AUTHORIZATION_FAILED. Brokers that reject credentials
// by closing the connection instead of answering SASL_AUTHENTICATION_FAILED
// (Kafka before 1.0, kfake) are recognised too: a call that fails on a broken
// connection after a SASL exchange broke off during that call is reported as
// SASL_AUTHENTICATION_FAILED.
func IsAuthError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrAuth) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind == KindAuth
	}
	return kindOfCause(err) == KindAuth
}

// IsUnreachable reports whether err is a connectivity failure or timeout:
// dial refused or timed out, DNS failure, connection broken, or the call not
// completing within the request timeout.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrUnreachable) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind == KindUnreachable
	}
	return kindOfCause(err) == KindUnreachable
}

// IsTLSError reports whether err is a TLS handshake, certificate or
// TLS/plaintext mismatch failure.
func IsTLSError(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrTLS) {
		return true
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Kind == KindTLS
	}
	return kindOfCause(err) == KindTLS
}

// KindOf returns the Kind of err (KindOther for errors not produced by this
// package and not recognisable).
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	switch {
	case errors.Is(err, ErrTopicExists):
		return KindTopicExists
	case errors.Is(err, ErrTopicNotFound):
		return KindTopicNotFound
	case errors.Is(err, ErrAuth):
		return KindAuth
	case errors.Is(err, ErrUnreachable):
		return KindUnreachable
	case errors.Is(err, ErrTLS):
		return KindTLS
	case errors.Is(err, ErrClosed):
		return KindClosed
	}
	return kindOfCause(err)
}

// authCodes are the Kafka error codes that mean "your identity or ACLs do not
// allow this".
var authCodes = []error{
	kerr.SaslAuthenticationFailed,
	kerr.IllegalSaslState,
	kerr.UnsupportedSaslMechanism,
	kerr.TopicAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.DelegationTokenAuthorizationFailed,
}

// kindOfCause classifies a raw (franz-go, net, crypto/tls, context) error.
func kindOfCause(err error) Kind {
	if err == nil {
		return KindOther
	}
	if errors.Is(err, kgo.ErrClientClosed) {
		return KindClosed
	}
	if _, ok := errors.AsType[*kadm.AuthError](err); ok {
		return KindAuth
	}
	for _, code := range authCodes {
		if errors.Is(err, code) {
			return KindAuth
		}
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return KindTopicExists
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		return KindTopicNotFound
	}
	if fe, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok && strings.Contains(fe.Error(), "SASL") {
		// The broker hung up right after our first request: it
		// requires SASL and we sent none.
		return KindAuth
	}
	if isTLSCause(err) {
		return KindTLS
	}
	if isNetCause(err) {
		return KindUnreachable
	}
	return KindOther
}

func isTLSCause(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	// franz-go's guess for "broker closed the connection right after the
	// dial / during ApiVersions": TLS on one side only.
	if fe, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		msg := fe.Error()
		return strings.Contains(msg, "TLS")
	}
	return strings.Contains(err.Error(), "tls: ")
}

func isNetCause(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*net.DNSError](err); ok {
		return true
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT, syscall.EPIPE} {
		if errors.Is(err, errno) {
			return true
		}
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return true
	}
	return false
}

// kafkaCode returns the Kafka error code name in err, if any.
func kafkaCode(err error) string {
	if ke, ok := errors.AsType[*kerr.Error](err); ok {
		return ke.Message
	}
	return ""
}

// newError builds an *Error for op from cause, classifying it and scrubbing
// secret out of the message. kind overrides the classification unless it is
// KindOther.
func newError(op string, kind Kind, cause error, secret string) *Error {
	if kind == KindOther {
		kind = KindOf(cause)
	}
	msg := "kafka " + op + ": " + cause.Error()
	if kind == KindClosed && !errors.Is(cause, ErrClosed) {
		cause = fmt.Errorf("%w: %w", ErrClosed, cause)
		msg = "kafka " + op + ": " + cause.Error()
	}
	// Defence in depth: franz-go never puts the password in an error, but
	// scrub it anyway. Very short secrets are skipped so that ordinary text
	// is not mangled.
	if len(secret) >= 4 {
		msg = strings.ReplaceAll(msg, secret, redacted)
	}
	return &Error{Op: op, Kind: kind, Code: kafkaCode(cause), msg: msg, err: cause}
}

// brokerErr wraps a per-resource broker error code with the broker's optional
// message, keeping the code name first ("INVALID_CONFIG: ...: message").
func brokerErr(err error, message string) error {
	if err == nil {
		return nil
	}
	if message == "" {
		return err
	}
	return fmt.Errorf("%w: %s", err, message)
}
