package franz

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/internal/kafka"
)

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

// classify returns the kind of a raw (franz-go, net, crypto/tls, context) error, or of an error
// of the kafka package.
func classify(err error) kafka.Kind {
	if err == nil {
		return kafka.KindOther
	}
	if _, ok := errors.AsType[*kafka.Error](err); ok {
		return kafka.KindOf(err)
	}
	if errors.Is(err, kgo.ErrClientClosed) {
		return kafka.KindClosed
	}
	if _, ok := errors.AsType[*kadm.AuthError](err); ok {
		return kafka.KindAuth
	}
	for _, code := range authCodes {
		if errors.Is(err, code) {
			return kafka.KindAuth
		}
	}
	if errors.Is(err, kerr.TopicAlreadyExists) {
		return kafka.KindTopicExists
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) {
		return kafka.KindTopicNotFound
	}
	if fe, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		msg := fe.Error()
		switch {
		case strings.Contains(msg, "SASL"):
			// The broker hung up right after our first request: it requires SASL and we sent
			// none.
			return kafka.KindAuth
		case strings.Contains(msg, "TLS"):
			// franz-go's guess for "broker closed the connection right after the dial / during
			// ApiVersions": TLS on one side only.
			return kafka.KindTLS
		}
	}
	return kafka.KindOf(err)
}

// newError builds a *kafka.Error for op from cause, classifying it, keeping its Kafka error code
// and scrubbing secret out of the message. kind overrides the classification unless it is
// KindOther.
func newError(op string, kind kafka.Kind, cause error, secret string) *kafka.Error {
	if kind == kafka.KindOther {
		kind = classify(cause)
	}
	e := kafka.NewError(op, kind, cause, secret)
	if ke, ok := errors.AsType[*kerr.Error](cause); ok {
		e = e.WithCode(ke.Message, ke.Retriable)
	}
	return e
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
