package kafkaspec

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// A tenant's CA Secret that holds anything but certificates is refused with a message naming the
// Secret, its key and what was found there, never the text; a good one is kept as its certificates
// encoded again.
func TestResolveRefusesACABundleWithTextOutsideCertificates(t *testing.T) {
	a, b := kafkatest.NewPKI(t, "a"), kafkatest.NewPKI(t, "b")
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
		secret("password-above", map[string]string{"ca.crt": "sasl.password=hunter2\n" + string(a.CAPEM)}),
		secret("broken-key", map[string]string{"bundle.pem": string(a.CAPEM) + "-----BEGIN PRIVATE KEY-----\nhunter2\n" + string(b.CAPEM)}),
		secret("good", map[string]string{"ca.crt": "\n" + strings.ReplaceAll(string(a.CAPEM), "\n", "\r\n") + "\n"}),
	).Build()
	spec := func(name, key string) *retryv1alpha1.KafkaConnection {
		return &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9093"},
			TLS: &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: name, Key: key}}}
	}
	for name, tc := range map[string]struct {
		spec *retryv1alpha1.KafkaConnection
		want string
	}{
		"a password above the certificate": {spec("password-above", ""), `Secret "password-above" key "ca.crt": TLS CA bundle: line 1: text outside a PEM block`},
		"a broken PRIVATE KEY block":       {spec("broken-key", "bundle.pem"), `Secret "broken-key" key "bundle.pem": TLS CA bundle: line `},
	} {
		_, err := Resolve(context.Background(), c, "ns", tc.spec, Defaults{})
		var e *Error
		if !errors.As(err, &e) || e.Missing || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %v, want a user error with %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the Secret: %v", name, err)
		}
	}
	conn, err := Resolve(context.Background(), c, "ns", spec("good", ""), Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(conn.TLS.CAPEM); got != string(a.CAPEM) {
		t.Errorf("the CA bundle kept is %q, want the certificate encoded again %q", got, a.CAPEM)
	}
}
