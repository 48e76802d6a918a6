package kafkaspec

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
)

// The consumers' identity on the default connection: found in the namespace's Secret in the shapes
// Strimzi's User Operator writes (SCRAM: password and sasl.jaas.config, named after the user; TLS:
// user.crt and user.key) or with explicit keys; a missing Secret or key says exactly what to create;
// no identity is asked for when the default connection does not authenticate.
func TestResolveConsumerIdentity(t *testing.T) {
	scramDefaults := Defaults{BootstrapServers: []string{"kafka:9093"}, TLS: &kafka.TLSConfig{CAPEM: []byte("ca")},
		SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "op", Password: "op-pass"}, ConsumerSecret: "{namespace}-consumer"}
	mtlsDefaults := Defaults{BootstrapServers: []string{"kafka:9093"}, TLS: &kafka.TLSConfig{CertPEM: []byte("c"), KeyPEM: []byte("k")}, ConsumerSecret: "kafka-user"}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
		secret("ns-consumer", map[string]string{"password": testPassword,
			"sasl.jaas.config": `org.apache.kafka.common.security.scram.ScramLoginModule required username="team.user" password="` + testPassword + `";`}),
		secret("kafka-user", map[string]string{"user.crt": "c", "user.key": "k", "user.p12": "p", "ca.crt": "x"}),
	).Build()
	cWith := func(data map[string]string) *fake.ClientBuilder {
		return fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(secret("ns-consumer", data))
	}
	for _, tc := range []struct {
		name     string
		d        Defaults
		reader   *fake.ClientBuilder
		want     *ConsumerIdentity
		missing  bool
		errParts []string
	}{
		{name: "a plaintext default connection needs no identity", d: Defaults{BootstrapServers: []string{"kafka:9092"}, ConsumerSecret: "x"}},
		{name: "TLS without client authentication needs none either", d: Defaults{BootstrapServers: []string{"kafka:9093"}, TLS: &kafka.TLSConfig{CAPEM: []byte("ca")}}},
		{name: "Strimzi SCRAM user: the user from sasl.jaas.config", d: scramDefaults,
			want: &ConsumerIdentity{Secret: "ns-consumer", Username: "team.user", PasswordKey: "password"}},
		{name: "a username key wins", d: scramDefaults, reader: cWith(map[string]string{"password": "p", "username": "u", "sasl.jaas.config": `username="other"`}),
			want: &ConsumerIdentity{Secret: "ns-consumer", UsernameKey: "username", PasswordKey: "password"}},
		{name: "no username anywhere: the Secret's name", d: scramDefaults, reader: cWith(map[string]string{"password": "p"}),
			want: &ConsumerIdentity{Secret: "ns-consumer", Username: "ns-consumer", PasswordKey: "password"}},
		{name: "Strimzi TLS user", d: mtlsDefaults, want: &ConsumerIdentity{Secret: "kafka-user", CertKey: "user.crt", KeyKey: "user.key"}},
		{name: "a kubernetes.io/tls Secret", d: Defaults{TLS: mtlsDefaults.TLS, ConsumerSecret: "ns-consumer"},
			reader: cWith(map[string]string{"tls.crt": "c", "tls.key": "k"}), want: &ConsumerIdentity{Secret: "ns-consumer", CertKey: "tls.crt", KeyKey: "tls.key"}},
		{name: "no Secret", d: Defaults{SASL: scramDefaults.SASL, ConsumerSecret: "absent"}, missing: true,
			errParts: []string{`Secret "absent" not found`, `SCRAM-SHA-512 credentials`, `create Secret "absent" in namespace "ns" with key "password"`, "or set spec.kafka"}},
		{name: "no password", d: scramDefaults, reader: cWith(map[string]string{"username": "u"}), missing: true,
			errParts: []string{`Secret "ns-consumer" has no key "password"`, `create Secret "ns-consumer"`}},
		{name: "no client certificate", d: Defaults{TLS: mtlsDefaults.TLS, ConsumerSecret: "ns-consumer"}, reader: cWith(map[string]string{"user.crt": "c"}), missing: true,
			errParts: []string{"has no client certificate", `keys "user.crt" and "user.key" (or "tls.crt" and "tls.key")`, "a TLS client certificate"}},
		{name: "tls.crt without tls.key", d: Defaults{TLS: mtlsDefaults.TLS, ConsumerSecret: "ns-consumer"}, reader: cWith(map[string]string{"tls.crt": "c", "user.key": "k"}), missing: true,
			errParts: []string{"has no client certificate"}},
		{name: "a hostile user name in sasl.jaas.config", d: scramDefaults, missing: true,
			reader:   cWith(map[string]string{"password": "p", "sasl.jaas.config": `username="` + strings.Repeat("u", 300) + `"`}),
			errParts: []string{"cannot be read as Kafka reads it", "at most 256 characters", `add key "username"`}},
		{name: "no --kafka-consumer-secret", d: Defaults{SASL: scramDefaults.SASL},
			errParts: []string{"the operator never lends its own to pods", "--kafka-consumer-secret", "or set spec.kafka"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := c
			if tc.reader != nil {
				r = tc.reader.Build()
			}
			got, err := ResolveConsumerIdentity(context.Background(), r, "ns", tc.d)
			if len(tc.errParts) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.want))
				return
			}
			var e *Error
			g.Expect(errors.As(err, &e)).To(BeTrue(), "%v", err)
			g.Expect(e.Missing).To(Equal(tc.missing))
			for _, part := range tc.errParts {
				g.Expect(e.Message).To(ContainSubstring(part))
			}
			g.Expect(e.Message).NotTo(Or(ContainSubstring(testPassword), ContainSubstring("op-pass")))
		})
	}
}

func TestCheckConsumerSecret(t *testing.T) {
	g := NewWithT(t)
	for _, ok := range []string{"", "kafka-user", "{namespace}-consumer", "consumers.{namespace}"} {
		g.Expect(CheckConsumerSecret(ok)).To(Succeed(), ok)
	}
	for _, bad := range []string{"Kafka_User", "{namespace}/x", strings.Repeat("a", 200) + "{namespace}"} {
		g.Expect(CheckConsumerSecret(bad)).NotTo(Succeed(), bad)
	}
	g.Expect(Defaults{ConsumerSecret: "{namespace}-consumer"}.ConsumerSecretName("team-a")).To(Equal("team-a-consumer"))
}
