package dispatcher

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/retryops/retry-operator/sdk/circuitstate"
)

func TestClassifyKafka(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want circuitstate.KafkaReason
	}{
		{"a refused password", fmt.Errorf("Authentication failed: %w", kerr.SaslAuthenticationFailed), circuitstate.KafkaAuthentication},
		{"an unsupported mechanism", kerr.UnsupportedSaslMechanism, circuitstate.KafkaAuthentication},
		{"an illegal SASL state", kerr.IllegalSaslState, circuitstate.KafkaAuthentication},
		{"a topic ACL", kerr.TopicAuthorizationFailed, circuitstate.KafkaAuthorization},
		{"a group ACL", kerr.GroupAuthorizationFailed, circuitstate.KafkaAuthorization},
		{"a cluster ACL", kerr.ClusterAuthorizationFailed, circuitstate.KafkaAuthorization},
		{"a transactional id ACL", kerr.TransactionalIDAuthorizationFailed, circuitstate.KafkaAuthorization},
		{"TLS to a plaintext listener", fmt.Errorf("unable to dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), circuitstate.KafkaTLS},
		{"an unknown CA", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, circuitstate.KafkaTLS},
		{"a wrong server name", fmt.Errorf("dial: %w", x509.HostnameError{Host: "kafka"}), circuitstate.KafkaTLS},
		{"a refused client certificate", &net.OpError{Op: "remote error", Err: errors.New("tls: bad certificate")}, circuitstate.KafkaTLS},
		{"a broker that is down", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, ""},
		{"a closed connection", io.EOF, ""},
		{"a transient error", kerr.NotCoordinator, ""},
		{"a leader change", kerr.NotLeaderForPartition, ""},
		{"nothing", nil, ""},
	} {
		if got := classifyKafka(tc.err); got != tc.want {
			t.Errorf("%s: classifyKafka(%v) = %q, want %q", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestKafkaTrackerLogsTheFirstThenEvery30s(t *testing.T) {
	var tr kafkaTracker
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	auth := circuitstate.KafkaAuthentication
	steps := []struct {
		at          time.Duration
		verdict     int
		repeats     int
		description string
	}{
		{0, kafkaLogFirst, 0, "the first failure"},
		{10 * time.Second, kafkaLogNone, 0, "a repeat within 30 s"},
		{29 * time.Second, kafkaLogNone, 0, "another"},
		{30 * time.Second, kafkaLogAgain, 2, "30 s after the first, with the two not logged"},
		{59 * time.Second, kafkaLogNone, 0, "within 30 s of that"},
		{60 * time.Second, kafkaLogAgain, 1, "30 s later"},
	}
	for _, s := range steps {
		v, r := tr.fail("broker 1", auth, "refused", nil, false, t0.Add(s.at))
		if v != s.verdict || r != s.repeats {
			t.Errorf("%s: verdict %d repeats %d, want %d %d", s.description, v, r, s.verdict, s.repeats)
		}
	}
	if w := tr.worst(); w == nil || !w.Since.Equal(t0) {
		t.Errorf("worst %+v, want since the first failure", w)
	}
	// A new reason at the same place starts afresh.
	if v, _ := tr.fail("broker 1", circuitstate.KafkaTLS, "handshake", nil, false, t0.Add(61*time.Second)); v != kafkaLogFirst {
		t.Errorf("a new reason: verdict %d, want first", v)
	}
}

func TestKafkaTrackerWorstAndClear(t *testing.T) {
	var tr kafkaTracker
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tr.fail("fetch a", circuitstate.KafkaAuthorization, "topic a", nil, true, t0)
	tr.fail("group", circuitstate.KafkaAuthorization, "group", nil, false, t0.Add(-time.Second))
	if w := tr.worst(); w.Reason != circuitstate.KafkaAuthorization || w.Message != "group" {
		t.Errorf("worst %+v, want the earliest authorization problem (group)", w)
	}
	tr.fail("broker 2", circuitstate.KafkaTLS, "tls", nil, false, t0.Add(time.Minute))
	tr.fail("broker 1", circuitstate.KafkaAuthentication, "sasl", nil, false, t0.Add(2*time.Minute))
	if w := tr.worst(); w.Reason != circuitstate.KafkaAuthentication || w.Message != "sasl" {
		t.Errorf("worst %+v, want authentication over TLS over authorization", w)
	}
	got := tr.clear(func(w string, _ *kafkaProblem) bool { return w == "broker 1" })
	if len(got) != 1 || got[0].message != "sasl" {
		t.Errorf("cleared %+v, want broker 1's", got)
	}
	if w := tr.worst(); w.Reason != circuitstate.KafkaTLS {
		t.Errorf("worst %+v after clearing authentication, want TLS", w)
	}
	tr.clear(func(string, *kafkaProblem) bool { return true })
	if w := tr.worst(); w != nil {
		t.Errorf("worst %+v with none left, want nil", w)
	}
}
