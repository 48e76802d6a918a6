package kafkaspec

import (
	"context"
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
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
		SASL:             &kafka.SASLConfig{Mechanism: kafka.MechanismPlain, Username: "op", Password: "op-pass"},
	}
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
		secret("user", map[string]string{"username": "app", "password": testPassword}),
		secret("no-password", map[string]string{"username": "app"}),
		secret("bad-ca", map[string]string{"ca.crt": "not a certificate"}),
	).Build()
	sasl := func(name string) *v1.KafkaSASL {
		return &v1.KafkaSASL{Mechanism: v1.SASLScramSHA512, SecretRef: v1.SecretReference{Name: name}}
	}
	for name, tc := range map[string]struct {
		spec        *v1.KafkaConnection
		want        kafka.Connection
		wantMissing bool
		wantText    string
	}{
		"no spec: the operator default": {
			want: kafka.Connection{BootstrapServers: []string{"default:9092"}, SASL: defaults.SASL},
		},
		"own servers: nothing of the default": {
			spec: &v1.KafkaConnection{BootstrapServers: []string{"own:9092"}},
			want: kafka.Connection{BootstrapServers: []string{"own:9092"}},
		},
		"own SASL on the default servers replaces the default SASL": {
			spec: &v1.KafkaConnection{SASL: sasl("user")},
			want: kafka.Connection{BootstrapServers: []string{"default:9092"},
				SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: "app", Password: testPassword}},
		},
		"missing Secret": {
			spec: &v1.KafkaConnection{SASL: sasl("nope")}, wantMissing: true, wantText: `Secret "nope" not found`,
		},
		"missing key": {
			spec: &v1.KafkaConnection{SASL: sasl("no-password")}, wantMissing: true, wantText: `Secret "no-password" has no key "password"`,
		},
		"CA key defaults to ca.crt and must be a certificate": {
			spec:     &v1.KafkaConnection{TLS: &v1.KafkaTLS{CASecretRef: &v1.SecretKeyReference{Name: "bad-ca"}}},
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

func TestSecretNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(SecretNames(nil)).To(BeEmpty())
	g.Expect(SecretNames(&v1.KafkaConnection{
		TLS:  &v1.KafkaTLS{CASecretRef: &v1.SecretKeyReference{Name: "ca"}, ClientCertSecretRef: &v1.SecretReference{Name: "user"}},
		SASL: &v1.KafkaSASL{Mechanism: v1.SASLPlain, SecretRef: v1.SecretReference{Name: "user"}},
	})).To(Equal([]string{"ca", "user"}))
}
