package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kerr"
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
	defaults := KafkaDefaults{
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
		spec       *v1.KafkaConnection
		want       kafka.Connection
		wantReason string
		wantText   string
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
			spec: &v1.KafkaConnection{SASL: sasl("nope")}, wantReason: v1.ReasonReferenceNotFound, wantText: `Secret "nope" not found`,
		},
		"missing key": {
			spec: &v1.KafkaConnection{SASL: sasl("no-password")}, wantReason: v1.ReasonReferenceNotFound, wantText: `Secret "no-password" has no key "password"`,
		},
		"CA key defaults to ca.crt and must be a certificate": {
			spec:       &v1.KafkaConnection{TLS: &v1.KafkaTLS{CASecretRef: &v1.SecretKeyReference{Name: "bad-ca"}}},
			wantReason: v1.ReasonInvalidSpec, wantText: "TLS CA bundle",
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := resolveConnection(context.Background(), c, "ns", tc.spec, defaults)
			if tc.wantReason == "" {
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got).To(Equal(tc.want))
				return
			}
			var p *problem
			g.Expect(errors.As(err, &p)).To(BeTrue(), "got %v", err)
			g.Expect(p.Reason).To(Equal(tc.wantReason))
			g.Expect(p.Message).To(ContainSubstring(tc.wantText))
			g.Expect(p.Message).NotTo(ContainSubstring(testPassword))
		})
	}

	t.Run("no servers anywhere", func(t *testing.T) {
		g := NewWithT(t)
		_, err := resolveConnection(context.Background(), c, "ns", nil, KafkaDefaults{})
		var p *problem
		g.Expect(errors.As(err, &p)).To(BeTrue())
		g.Expect(p.Reason).To(Equal(v1.ReasonInvalidSpec))
		g.Expect(p.Kind).To(Equal(problemUser))
	})
}

func TestKafkaSecretNames(t *testing.T) {
	g := NewWithT(t)
	g.Expect(kafkaSecretNames(nil)).To(BeEmpty())
	g.Expect(kafkaSecretNames(&v1.KafkaConnection{
		TLS:  &v1.KafkaTLS{CASecretRef: &v1.SecretKeyReference{Name: "ca"}, ClientCertSecretRef: &v1.SecretReference{Name: "user"}},
		SASL: &v1.KafkaSASL{Mechanism: v1.SASLPlain, SecretRef: v1.SecretReference{Name: "user"}},
	})).To(Equal([]string{"ca", "user"}))
}

func TestKafkaProblem(t *testing.T) {
	for name, tc := range map[string]struct {
		err        error
		wantReason string
		wantKind   problemKind
	}{
		"credentials refused":            {fmt.Errorf("kafka ping: %w", kafka.ErrAuth), v1.ReasonKafkaUnauthorized, problemTransient},
		"ACL denies the topic":           {fmt.Errorf("describe: %w", kerr.TopicAuthorizationFailed), v1.ReasonKafkaUnauthorized, problemTransient},
		"broker unreachable":             {fmt.Errorf("dial: %w", kafka.ErrUnreachable), v1.ReasonKafkaUnavailable, problemTransient},
		"TLS handshake failed":           {fmt.Errorf("dial: %w", kafka.ErrTLS), v1.ReasonKafkaUnavailable, problemTransient},
		"retriable broker code":          {fmt.Errorf("create: %w", kerr.NotController), v1.ReasonKafkaUnavailable, problemTransient},
		"invalid config value":           {fmt.Errorf("create: %w", kerr.InvalidConfig), v1.ReasonKafkaRejected, problemWaiting},
		"replication factor too large":   {fmt.Errorf("create: %w", kerr.InvalidReplicationFactor), v1.ReasonKafkaRejected, problemWaiting},
		"invalid connection":             {&kafka.ConfigError{Errs: []error{errors.New("bad")}}, v1.ReasonInvalidSpec, problemUser},
		"anything else is transient":     {errors.New("boom"), v1.ReasonKafkaUnavailable, problemTransient},
		"a problem passes through as is": {&problem{Reason: v1.ReasonTopicConflict}, v1.ReasonTopicConflict, problemWaiting},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			p := kafkaProblem(tc.err)
			g.Expect(p.Reason).To(Equal(tc.wantReason))
			g.Expect(p.Kind).To(Equal(tc.wantKind))
			if p.Kind == problemTransient {
				g.Expect(p.Err).To(MatchError(tc.err))
			}
		})
	}
	NewWithT(t).Expect(kafkaProblem(nil)).To(BeNil())
}

// countingFactory records Forget calls.
type countingFactory struct{ forgotten []string }

func (f *countingFactory) Admin(context.Context, kafka.Connection) (kafka.Admin, error) {
	return nil, nil
}
func (f *countingFactory) Forget(key string) bool {
	f.forgotten = append(f.forgotten, key)
	return true
}

func TestConnectionRegistryForgetsAClientNobodyUses(t *testing.T) {
	g := NewWithT(t)
	f := &countingFactory{}
	r := newConnectionRegistry(f)
	old := kafka.Connection{BootstrapServers: []string{"k:9092"}, SASL: &kafka.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "old"}}
	rotated := old
	rotated.SASL = &kafka.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "new"}
	ctx := context.Background()

	_, _, _ = r.admin(ctx, "a", old)
	_, _, _ = r.admin(ctx, "b", old)
	_, _, _ = r.admin(ctx, "a", rotated)
	g.Expect(f.forgotten).To(BeEmpty(), "b still uses the old client")
	_, _, _ = r.admin(ctx, "b", rotated)
	g.Expect(f.forgotten).To(Equal([]string{old.Key()}))
	_, _, _ = r.admin(ctx, "b", rotated)
	r.release("a")
	g.Expect(f.forgotten).To(HaveLen(1))
	r.release("b")
	g.Expect(f.forgotten).To(Equal([]string{old.Key(), rotated.Key()}))
	r.release("b")
	g.Expect(f.forgotten).To(HaveLen(2))
	g.Expect(strings.Join(f.forgotten, "")).NotTo(ContainSubstring("new"))
}
