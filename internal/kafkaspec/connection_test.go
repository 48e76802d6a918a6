package kafkaspec

import (
	"context"
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
)

const testPassword = "n0t-in-any-message"

func secret(name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestResolveConnection(t *testing.T) {
	defaults := Defaults{
		BootstrapServers: []string{"default:9092"},
		SASL:             &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA256, Username: "op", Password: "op-pass"},
	}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
		secret("user", map[string]string{"username": "app", "password": testPassword}),
		secret("no-password", map[string]string{"username": "app"}),
		secret("bad-ca", map[string]string{"ca.crt": "not a certificate"}),
	).Build()
	sasl := func(name string) *retryv1alpha1.KafkaSASL {
		return &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: name}}
	}
	for name, tc := range map[string]struct {
		spec        *retryv1alpha1.KafkaConnection
		want        kafka.Connection
		wantMissing bool
		wantText    string
	}{
		"no spec: the operator default": {
			want: kafka.Connection{BootstrapServers: []string{"default:9092"}, SASL: defaults.SASL},
		},
		"own servers: nothing of the default": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}},
			want: kafka.Connection{BootstrapServers: []string{"own:9092"}},
		},
		"own servers and SASL": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}, SASL: sasl("user")},
			want: kafka.Connection{BootstrapServers: []string{"own:9092"},
				SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "app", Password: testPassword}},
		},
		"own SASL without servers is refused, not merged with the default": {
			spec:     &retryv1alpha1.KafkaConnection{SASL: sasl("user")},
			wantText: "spec.kafka.tls and spec.kafka.sasl apply only with spec.kafka.bootstrapServers",
		},
		"own TLS without servers is refused: the default SASL is never sent under the resource's TLS": {
			spec:     &retryv1alpha1.KafkaConnection{TLS: &retryv1alpha1.KafkaTLS{ServerName: "kafka.internal"}},
			wantText: "the operator's default connection (its servers, TLS and SASL) is used whole",
		},
		"PLAIN without TLS is refused": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "user"}}},
			wantText: "SASL PLAIN without TLS would send the password in clear text",
		},
		"PLAIN without TLS when the resource allows it": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "user"}, PlaintextPassword: retryv1alpha1.PlaintextPasswordAllow}},
			want: kafka.Connection{BootstrapServers: []string{"own:9092"},
				SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismPlain, Username: "app", Password: testPassword, AllowPlaintext: true}},
		},
		"PLAIN over TLS": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}, TLS: &retryv1alpha1.KafkaTLS{},
				SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "user"}}},
			want: kafka.Connection{BootstrapServers: []string{"own:9092"}, TLS: &kafka.TLSConfig{},
				SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismPlain, Username: "app", Password: testPassword}},
		},
		"missing Secret": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}, SASL: sasl("nope")}, wantMissing: true, wantText: `Secret "nope" not found`,
		},
		"missing key": {
			spec: &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}, SASL: sasl("no-password")}, wantMissing: true, wantText: `Secret "no-password" has no key "password"`,
		},
		"CA key defaults to ca.crt and must be a certificate": {
			spec:     &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9092"}, TLS: &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "bad-ca"}}},
			wantText: "TLS CA bundle",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Resolve(context.Background(), c, "ns", tc.spec, defaults)
			if tc.wantText == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.want))
				return
			}
			var e *Error
			g.Expect(errors.As(err, &e)).To(BeTrue(), "got %v", err)
			g.Expect(e.Missing).To(Equal(tc.wantMissing))
			g.Expect(e.Message).To(ContainSubstring(tc.wantText))
			g.Expect(e.Message).NotTo(ContainSubstring(testPassword))
		})
	}

	t.Run("no servers anywhere", func(t *testing.T) {
		g := NewWithT(t)
		_, err := Resolve(context.Background(), c, "ns", nil, Defaults{})
		var e *Error
		g.Expect(errors.As(err, &e)).To(BeTrue())
		g.Expect(e.Missing).To(BeFalse(), "a spec error, not something to wait for")
	})
}

func TestResolveUnderTheManagersTenancyFlags(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
		secret("user", map[string]string{"username": "app", "password": testPassword}),
	).Build()
	own := func(servers ...string) *retryv1alpha1.KafkaConnection {
		return &retryv1alpha1.KafkaConnection{BootstrapServers: servers,
			SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "user"}}}
	}
	allowList := Defaults{
		BootstrapServers: []string{"default.ops:9092"},
		Tenancy:          Tenancy{AllowedBootstrapServers: []string{"*.kafka.svc:9092", "broker-0.example.com:9093"}},
	}
	requireOwn := Defaults{
		BootstrapServers: []string{"default.ops:9092"},
		SASL:             &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "op", Password: "op-pass"},
		Tenancy:          Tenancy{RequireResourceCredentials: true},
	}
	for name, tc := range map[string]struct {
		spec     *retryv1alpha1.KafkaConnection
		d        Defaults
		wantText []string // empty: resolves
	}{
		"an allowed server":                        {spec: own("a.kafka.svc:9092"), d: allowList},
		"the wildcard stands for several labels":   {spec: own("b-1.main.kafka.svc:9092"), d: allowList},
		"an exact pattern, case-insensitively":     {spec: own("Broker-0.Example.com:9093"), d: allowList},
		"the default connection is not restricted": {d: allowList},
		"a server outside the list": {spec: own("a.kafka.svc:9092", "evil.example.org:9092"), d: allowList,
			wantText: []string{`bootstrap server "evil.example.org:9092"`, "--kafka-allowed-bootstrap-servers"}},
		"the wildcard needs a label before the suffix": {spec: own("kafka.svc:9092"), d: allowList,
			wantText: []string{`bootstrap server "kafka.svc:9092"`, "--kafka-allowed-bootstrap-servers"}},
		"another port": {spec: own("a.kafka.svc:9093"), d: allowList,
			wantText: []string{`bootstrap server "a.kafka.svc:9093"`}},
		"a suffix that only looks alike": {spec: own("a.evilkafka.svc:9092"), d: allowList,
			wantText: []string{`bootstrap server "a.evilkafka.svc:9092"`}},
		"own credentials under require-resource-credentials": {spec: own("own:9092"), d: requireOwn},
		"no spec.kafka under require-resource-credentials": {d: requireOwn,
			wantText: []string{"--require-resource-credentials", "spec.kafka.bootstrapServers"}},
		"an empty spec.kafka under require-resource-credentials": {spec: &retryv1alpha1.KafkaConnection{}, d: requireOwn,
			wantText: []string{"--require-resource-credentials"}},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := Resolve(context.Background(), c, "ns", tc.spec, tc.d)
			if len(tc.wantText) == 0 {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got.BootstrapServers).NotTo(BeEmpty())
				return
			}
			var e *Error
			g.Expect(errors.As(err, &e)).To(BeTrue(), "got %v", err)
			g.Expect(e.Missing).To(BeFalse(), "a spec error, not something to wait for")
			for _, w := range tc.wantText {
				g.Expect(e.Message).To(ContainSubstring(w))
			}
			g.Expect(e.Message).NotTo(ContainSubstring(testPassword))
		})
	}
}

func TestCheckAllowedServers(t *testing.T) {
	for _, ok := range [][]string{nil, {"*.kafka.svc:9092", "broker:9092", "[::1]:9092", "10.0.0.1:9092"}} {
		if err := CheckAllowedServers(ok); err != nil {
			t.Errorf("%v rejected: %v", ok, err)
		}
	}
	for _, bad := range []string{"kafka.svc", "*:9092", "a.*.svc:9092", "*kafka.svc:9092", "*.:9092", "broker:0", "broker:x"} {
		if err := CheckAllowedServers([]string{bad}); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("%q: error %v, want one naming it", bad, err)
		}
	}
}

func TestSecretNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(SecretNames(nil)).To(BeEmpty())
	g.Expect(SecretNames(&retryv1alpha1.KafkaConnection{
		TLS:  &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "ca"}, ClientCertSecretRef: &retryv1alpha1.SecretReference{Name: "user"}},
		SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "user"}},
	})).To(Equal([]string{"ca", "user"}))
}
