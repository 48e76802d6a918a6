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
	// factory, or the factory was closed); obtain a new one from the
	// factory.
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
	// Retriable is true when Code is one Kafka documents as retriable (the
	// same request may succeed later without any change, NOT_CONTROLLER
	// say).
	Retriable bool

	msg string
	err error
}

// NewError wraps cause as the failure of op, for implementations of Admin
// and their fakes. A kind of KindOther is refined from the cause (the
// sentinels, network, TLS and deadline errors); secret (a SASL password) is
// scrubbed from the message. Use WithCode to record a broker error code.
func NewError(op string, kind Kind, cause error, secret string) *Error {
	if kind == KindOther {
		kind = KindOf(cause)
	}
	if kind == KindClosed && !errors.Is(cause, ErrClosed) {
		cause = fmt.Errorf("%w: %w", ErrClosed, cause)
	}
	msg := "kafka " + op + ": " + cause.Error()
	// Defence in depth: client libraries do not put the password in an
	// error, but scrub it anyway. Very short secrets are skipped so that
	// ordinary text is not mangled.
	if len(secret) >= 4 {
		msg = strings.ReplaceAll(msg, secret, redacted)
	}
	return &Error{Op: op, Kind: kind, msg: msg, err: cause}
}

// WithCode records the Kafka error code the failure carries, and whether
// Kafka documents it as retriable, and returns e.
func (e *Error) WithCode(code string, retriable bool) *Error {
	e.Code, e.Retriable = code, retriable
	return e
}

// Error returns the (secret-free) message.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the underlying cause, so that errors.Is and errors.As keep
// working on it.
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
// TOPIC/CLUSTER/GROUP_AUTHORIZATION_FAILED.
func IsAuthError(err error) bool {
	return err != nil && (errors.Is(err, ErrAuth) || KindOf(err) == KindAuth)
}

// IsUnreachable reports whether err is a connectivity failure or timeout:
// dial refused or timed out, DNS failure, connection broken, or the call not
// completing within the request timeout.
func IsUnreachable(err error) bool {
	return err != nil && (errors.Is(err, ErrUnreachable) || KindOf(err) == KindUnreachable)
}

// IsTLSError reports whether err is a TLS handshake, certificate or
// TLS/plaintext mismatch failure.
func IsTLSError(err error) bool {
	return err != nil && (errors.Is(err, ErrTLS) || KindOf(err) == KindTLS)
}

// IsRetriable reports whether err carries a Kafka error code that Kafka
// documents as retriable.
func IsRetriable(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Code != "" && e.Retriable
}

// CodeOf returns the Kafka error code name err carries, or "".
func CodeOf(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return ""
}

// KindOf returns the Kind of err: an *Error's own, a sentinel's, or the kind
// of a standard library cause (network, TLS, deadline); KindOther for
// anything else.
func KindOf(err error) Kind {
	if e, ok := errors.AsType[*Error](err); ok {
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
	switch {
	case err == nil:
		return KindOther
	case IsTLSCause(err):
		return KindTLS
	case IsNetCause(err):
		return KindUnreachable
	}
	return KindOther
}

// IsTLSCause reports whether err is a crypto/tls or crypto/x509 failure.
func IsTLSCause(err error) bool {
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
	return strings.Contains(err.Error(), "tls: ")
}

// IsNetCause reports whether err is a network failure or a deadline.
func IsNetCause(err error) bool {
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
