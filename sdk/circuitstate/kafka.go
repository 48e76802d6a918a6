package circuitstate

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// KafkaReason is the kind of a Kafka connection problem a consumer reports.
type KafkaReason string

// The reasons, from the worst: a consumer that cannot authenticate or complete the TLS handshake
// reaches nothing; one refused an operation may still do the others.
const (
	// KafkaAuthentication: the brokers refused the SASL credentials or mechanism.
	KafkaAuthentication KafkaReason = "Authentication"
	// KafkaTLS: the TLS handshake failed (an unknown CA, a wrong server name, a refused client
	// certificate), or one side speaks TLS and the other plaintext.
	KafkaTLS KafkaReason = "TLS"
	// KafkaAuthorization: the brokers refused an operation (ACLs): reading a topic, joining the
	// group, writing a retry tier or the dead letter topic.
	KafkaAuthorization KafkaReason = "Authorization"
)

func (r KafkaReason) rank() int {
	switch r {
	case KafkaAuthentication:
		return 3
	case KafkaTLS:
		return 2
	case KafkaAuthorization:
		return 1
	}
	return 0
}

// MaxKafkaMessage bounds a KafkaProblem's Message in bytes.
const MaxKafkaMessage = 256

// KafkaProblem is a consumer's Kafka connection problem.
type KafkaProblem struct {
	// Reason is the kind of problem.
	Reason KafkaReason `json:"reason"`
	// Message is the broker's (or the TLS library's) error, BoundMessage'd.
	Message string `json:"message"`
	// Since is when the problem started.
	Since time.Time `json:"since"`
}

func (k *KafkaProblem) check() error {
	if k.Reason.rank() == 0 {
		return fmt.Errorf("kafka.reason %q is not Authentication, TLS or Authorization", k.Reason)
	}
	k.Message = BoundMessage(k.Message)
	return nil
}

// BoundMessage returns s fit for a condition's message: control and bidirectional formatting
// characters removed (invalid UTF-8 too), runs of spaces folded, and cut to MaxKafkaMessage bytes on
// a character boundary, ending in "..." when cut.
func BoundMessage(s string) string {
	var b strings.Builder
	space := false
	for len(s) > 0 && b.Len() <= MaxKafkaMessage {
		r, n := utf8.DecodeRuneInString(s)
		s = s[n:]
		switch {
		case r == utf8.RuneError && n <= 1, unicode.IsControl(r) && !unicode.IsSpace(r), unicode.Is(unicode.Bidi_Control, r):
			continue
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	out := b.String()
	if len(out) <= MaxKafkaMessage && len(s) == 0 {
		return out
	}
	const ellipsis = "..."
	cut := MaxKafkaMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(out[cut]) {
		cut--
	}
	return out[:cut] + ellipsis
}

// KafkaSummary is the fold of the fresh entries' Kafka problems: the worst reason, the pods that
// report it and the earliest of their problems.
type KafkaSummary struct {
	// Reason is the worst reason reported.
	Reason KafkaReason
	// Pods are the pods reporting Reason, sorted.
	Pods []string
	// Since is the earliest Since among Pods.
	Since time.Time
	// Message is the message of the pod whose problem started first.
	Message string
}

// add folds pod's problem into k (nil: none yet) and returns the result. Pods come sorted.
func (k *KafkaSummary) add(pod string, p *KafkaProblem) *KafkaSummary {
	switch {
	case k == nil || p.Reason.rank() > k.Reason.rank():
		return &KafkaSummary{Reason: p.Reason, Pods: []string{pod}, Since: p.Since, Message: p.Message}
	case p.Reason == k.Reason:
		k.Pods = append(k.Pods, pod)
		if p.Since.Before(k.Since) {
			k.Since, k.Message = p.Since, p.Message
		}
	}
	return k
}

// Text describes the problem for a condition: what fails, which pods since when, and the
// broker's error.
func (k *KafkaSummary) Text(replicas int32) string {
	what := "consumers are not authorized by Kafka"
	switch k.Reason {
	case KafkaAuthentication:
		what = "consumers cannot authenticate to Kafka"
	case KafkaTLS:
		what = "consumers cannot connect to Kafka over TLS"
	}
	return fmt.Sprintf("%s (%d of %d pods since %s: %s): %s",
		what, len(k.Pods), replicas, k.Since.UTC().Format(time.RFC3339), podList(k.Pods), k.Message)
}

// podList names up to three pods and counts the others.
func podList(pods []string) string {
	if len(pods) > 3 {
		return strings.Join(pods[:3], ", ") + fmt.Sprintf(" and %d more", len(pods)-3)
	}
	return strings.Join(pods, ", ")
}
