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

// The keys a connection reads from a tenant's Secrets are bounded: a CA bundle as the manager's own
// (256 KiB), a client certificate or key to 64 KiB, a user name or password to 16 KiB. What a
// resource's connection keeps in the shared manager's memory is then bounded whatever a tenant
// writes into a Secret (up to 1 MiB each); a key over its bound is refused, naming the Secret, the
// key and both sizes, never the value.
func TestResolveBoundsWhatItReadsFromSecrets(t *testing.T) {
	pki := kafkatest.NewPKI(t, "big")
	cert, key := pki.Issue(t, "client", false)
	bigCA := strings.Repeat(string(pki.CAPEM), (256<<10)/len(pki.CAPEM)+1)
	c := fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).WithObjects(
		secret("big-ca", map[string]string{"ca.crt": bigCA}),
		secret("big-key", map[string]string{"tls.crt": string(cert), "tls.key": string(key) + strings.Repeat("\n", 64<<10)}),
		secret("big-password", map[string]string{"username": "app", "password": strings.Repeat("p", 16<<10+1)}),
	).Build()
	tls := func(ca, client string) *retryv1alpha1.KafkaConnection {
		t := &retryv1alpha1.KafkaTLS{}
		if ca != "" {
			t.CASecretRef = &retryv1alpha1.SecretKeyReference{Name: ca}
		}
		if client != "" {
			t.ClientCertSecretRef = &retryv1alpha1.SecretReference{Name: client}
		}
		return &retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9093"}, TLS: t}
	}
	for name, tc := range map[string]struct {
		spec *retryv1alpha1.KafkaConnection
		want string
	}{
		"a CA bundle over 256 KiB": {tls("big-ca", ""), `Secret "big-ca" key "ca.crt" holds `},
		"a client key over 64 KiB": {tls("", "big-key"), `Secret "big-key" key "tls.key" holds `},
		"a password over 16 KiB": {&retryv1alpha1.KafkaConnection{BootstrapServers: []string{"own:9093"},
			SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "big-password"}}}, `Secret "big-password" key "password" holds 16385 bytes, more than 16384`},
	} {
		_, err := Resolve(context.Background(), c, "ns", tc.spec, Defaults{})
		var e *Error
		if !errors.As(err, &e) || e.Missing || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %v, want a user error with %q", name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "ppp") {
			t.Errorf("%s: the error shows the Secret: %v", name, err)
		}
	}
}
