package franz

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafkaspec"
	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// saslRecorder records, from the broker's side, the user every SASLAuthenticate request
// authenticates as (PLAIN: authzid NUL user NUL password; SCRAM: the client-first message
// "n,,n=<user>,r=<nonce>"). kfake then handles the request as usual.
type saslRecorder struct {
	mu    sync.Mutex
	users []string
}

func recordSASL(c *kfake.Cluster) *saslRecorder {
	r := &saslRecorder{}
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		auth := req.(*kmsg.SASLAuthenticateRequest).SASLAuthBytes
		var user string
		switch {
		case bytes.HasPrefix(auth, []byte("n,")): // SCRAM client-first
			for _, f := range strings.Split(string(auth), ",") {
				if u, ok := strings.CutPrefix(f, "n="); ok {
					user = u
				}
			}
		case bytes.Count(auth, []byte{0}) == 2: // PLAIN
			user = string(bytes.Split(auth, []byte{0})[1])
		default: // SCRAM client-final: no user in it
			return nil, nil, false
		}
		r.mu.Lock()
		r.users = append(r.users, user)
		r.mu.Unlock()
		return nil, nil, false
	})
	return r
}

// take returns the users seen since the last call and forgets them.
func (r *saslRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := r.users
	r.users = nil
	return u
}

// TestTheDefaultCredentialsAreNeverLentToAResourcesTLS is the acceptance test of tenancy: a resource with
// only tls and no bootstrap servers does not get the operator's default SASL credentials (as the
// broker sees it), a resource with its own servers authenticates as its own user, and SASL PLAIN
// without TLS is refused with a clear message before anything is sent. Each connection goes the way
// the controllers take: kafkaspec.Resolve, then the franz-go factory's admin client and a call.
func TestTheDefaultCredentialsAreNeverLentToAResourcesTLS(t *testing.T) {
	pki := kafkatest.NewPKI(t, "tenant-ca")
	const opPass, tenantPass, plainPass = "op-Passw0rd-secret", "tenant-Passw0rd-secret", "plain-Passw0rd-secret"
	tlsCluster := newCluster(t, kfake.TLS(pki.ServerTLS(t)), kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismScramSHA256, "op-user", opPass),
		kfake.Superuser(kafka.MechanismScramSHA512, "tenant-user", tenantPass),
	)
	plainCluster := newCluster(t, kfake.EnableSASL(), kfake.Superuser(kafka.MechanismPlain, "plain-user", plainPass))
	seen, seenPlain := recordSASL(tlsCluster), recordSASL(plainCluster)

	secret := func(name string, data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	c := fake.NewClientBuilder().WithObjects(
		secret("tenant-ca", map[string]string{"ca.crt": string(pki.CAPEM)}),
		secret("tenant-user", map[string]string{"username": "tenant-user", "password": tenantPass}),
		secret("plain-user", map[string]string{"username": "plain-user", "password": plainPass}),
	).Build()
	// The operator's default connection: the TLS cluster, as op-user.
	defaults := kafkaspec.Defaults{
		BootstrapServers: tlsCluster.ListenAddrs(),
		TLS:              &kafka.TLSConfig{CAPEM: pki.CAPEM},
		SASL:             &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA256, Username: "op-user", Password: opPass},
	}
	f := NewFactory()
	t.Cleanup(f.Close)
	// connect resolves spec as a reconcile does and describes a topic through the factory.
	connect := func(t *testing.T, spec *retryv1alpha1.KafkaConnection) error {
		t.Helper()
		ctx := ctxT(t)
		conn, err := kafkaspec.Resolve(ctx, c, "tenant", spec, defaults)
		if err != nil {
			return err
		}
		a, err := f.Admin(ctx, conn)
		if err != nil {
			return err
		}
		_, err = a.DescribeTopics(ctx, "orders")
		return err
	}
	tenantCA := &retryv1alpha1.KafkaTLS{CASecretRef: &retryv1alpha1.SecretKeyReference{Name: "tenant-ca"}}

	t.Run("no spec.kafka: the default connection, whole", func(t *testing.T) {
		if err := connect(t, nil); err != nil {
			t.Fatal(err)
		}
		if got := seen.take(); len(got) == 0 || got[0] != "op-user" {
			t.Fatalf("the broker saw %v, want op-user (or the recorder sees nothing)", got)
		}
	})

	t.Run("only tls: refused before connecting, no default credentials", func(t *testing.T) {
		err := connect(t, &retryv1alpha1.KafkaConnection{TLS: tenantCA})
		var e *kafkaspec.Error
		if !errors.As(err, &e) || !strings.Contains(e.Message, "apply only with spec.kafka.bootstrapServers") {
			t.Errorf("want a kafkaspec.Error saying tls needs bootstrapServers, got %v", err)
		}
		if got := seen.take(); len(got) > 0 {
			t.Errorf("the broker saw authentication as %v from a resource with only tls", got)
		}
	})

	t.Run("own servers, tls and sasl: authenticates as its own user", func(t *testing.T) {
		err := connect(t, &retryv1alpha1.KafkaConnection{BootstrapServers: tlsCluster.ListenAddrs(), TLS: tenantCA,
			SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLScramSHA512, SecretRef: retryv1alpha1.SecretReference{Name: "tenant-user"}}})
		if err != nil {
			t.Fatal(err)
		}
		got := seen.take()
		if len(got) == 0 {
			t.Fatal("the broker saw no authentication")
		}
		for _, u := range got {
			if u != "tenant-user" {
				t.Errorf("the broker saw authentication as %q, want tenant-user only (all: %v)", u, got)
			}
		}
	})

	plainSpec := func(allow retryv1alpha1.PlaintextPassword) *retryv1alpha1.KafkaConnection {
		return &retryv1alpha1.KafkaConnection{BootstrapServers: plainCluster.ListenAddrs(),
			SASL: &retryv1alpha1.KafkaSASL{Mechanism: retryv1alpha1.SASLPlain, SecretRef: retryv1alpha1.SecretReference{Name: "plain-user"}, PlaintextPassword: allow}}
	}
	t.Run("PLAIN without TLS: refused with a clear message, nothing sent", func(t *testing.T) {
		for _, allow := range []retryv1alpha1.PlaintextPassword{"", retryv1alpha1.PlaintextPasswordRefuse} {
			err := connect(t, plainSpec(allow))
			var e *kafkaspec.Error
			if !errors.As(err, &e) || !strings.Contains(e.Message, "SASL PLAIN without TLS would send the password in clear text") {
				t.Errorf("plaintextPassword %q: want a clear kafkaspec.Error, got %v", allow, err)
			}
			if err != nil && strings.Contains(err.Error(), plainPass) {
				t.Errorf("the message shows the password: %v", err)
			}
		}
		// The factory refuses such a connection too, whoever built it.
		_, err := f.Admin(ctxT(t), kafka.Connection{BootstrapServers: plainCluster.ListenAddrs(),
			SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismPlain, Username: "plain-user", Password: plainPass}})
		var ce *kafka.ConfigError
		if !errors.As(err, &ce) || strings.Contains(err.Error(), plainPass) {
			t.Errorf("factory: want a *kafka.ConfigError without the password, got %v", err)
		}
		if got := seenPlain.take(); len(got) > 0 {
			t.Errorf("the broker saw PLAIN authentication as %v", got)
		}
	})

	t.Run("PLAIN without TLS when the resource allows it", func(t *testing.T) {
		if err := connect(t, plainSpec(retryv1alpha1.PlaintextPasswordAllow)); err != nil {
			t.Fatal(err)
		}
		if got := seenPlain.take(); len(got) == 0 || got[0] != "plain-user" {
			t.Errorf("the broker saw %v, want plain-user", got)
		}
	})
}
