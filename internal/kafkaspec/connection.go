package kafkaspec

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Keys read from the Secrets a KafkaConnection references.
const (
	secretKeyCA       = "ca.crt"
	secretKeyCert     = corev1.TLSCertKey
	secretKeyKey      = corev1.TLSPrivateKeyKey
	secretKeyUsername = "username"
	secretKeyPassword = "password"
)

// The bounds of what a connection reads from a tenant's Secret, which it keeps (a Secret holds up to
// 1 MiB): a CA bundle as large as the manager's own may be, a client certificate chain or key, a
// user name or password (a token included).
const (
	maxSecretCA         = 256 << 10
	maxSecretCert       = 64 << 10
	maxSecretCredential = 16 << 10
)

// Defaults is the operator-wide default Kafka connection, used by resources whose spec.kafka
// names no bootstrap servers, and the manager's limits on the connections of resources.
//
// No merging: a resource that sets spec.kafka.bootstrapServers gets exactly its own connection (its
// tls and sasl, or none); a resource that does not gets the default connection whole (its servers,
// TLS and SASL) and may set neither tls nor sasl. Mixing the two would send the default credentials
// to a server checked against a tenant's CA, or a tenant's credentials to the default cluster.
type Defaults struct {
	// BootstrapServers are the default seed brokers.
	BootstrapServers []string
	// TLS is the default TLS configuration; nil means plaintext.
	TLS *kafka.TLSConfig
	// SASL is the default SASL configuration; nil means none.
	SASL *kafka.SASLConfig
	// ConsumerSecret names the Secret, in each pipeline's namespace, that gives the pods of pipelines
	// on the default connection their identity ({namespace} stands for the namespace; see
	// ResolveConsumerIdentity). Empty: none, and such pods get no credentials.
	ConsumerSecret string
	// Tenancy limits the connections resources may ask for.
	Tenancy
}

// Error is a problem with spec.kafka: a Secret or key it names that does not exist (Missing; it
// may be created later), or a connection that cannot work as specified. The message names what to
// fix and never a secret's value.
type Error struct {
	// Missing is true for a missing Secret or key.
	Missing bool
	// Message says what is wrong.
	Message string
}

func (e *Error) Error() string { return e.Message }

// Servers returns the bootstrap servers a KafkaConnection resolves to, without reading any Secret.
// It identifies the cluster for topic claims.
func Servers(spec *retryv1alpha1.KafkaConnection, d Defaults) []string {
	if spec != nil && len(spec.BootstrapServers) > 0 {
		return spec.BootstrapServers
	}
	return d.BootstrapServers
}

// SecretNames lists the Secrets a KafkaConnection references, sorted and distinct.
func SecretNames(spec *retryv1alpha1.KafkaConnection) []string {
	if spec == nil {
		return nil
	}
	var names []string
	if spec.TLS != nil {
		if spec.TLS.CASecretRef != nil {
			names = append(names, spec.TLS.CASecretRef.Name)
		}
		if spec.TLS.ClientCertSecretRef != nil {
			names = append(names, spec.TLS.ClientCertSecretRef.Name)
		}
	}
	if spec.SASL != nil {
		names = append(names, spec.SASL.SecretRef.Name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Resolve turns a KafkaConnection, the Secrets it references (read in namespace through c) and the
// operator defaults into a kafka.Connection. A missing Secret or key, or an unusable connection, is
// an *Error; other errors come from the API server.
//
// A spec without bootstrap servers gets the default connection whole, or an *Error when it sets tls
// or sasl (objects stored before the CRD's rule) or the manager requires resources' own credentials.
// A spec's own servers must match the manager's allow-list.
func Resolve(ctx context.Context, c client.Reader, namespace string, spec *retryv1alpha1.KafkaConnection, d Defaults) (kafka.Connection, error) {
	if err := d.check(spec); err != nil {
		return kafka.Connection{}, err
	}
	if spec == nil || len(spec.BootstrapServers) == 0 {
		conn := kafka.Connection{BootstrapServers: d.BootstrapServers, TLS: d.TLS, SASL: d.SASL}
		if len(conn.BootstrapServers) == 0 {
			return kafka.Connection{}, &Error{
				Message: "no Kafka bootstrap servers: set spec.kafka.bootstrapServers or start the manager with --kafka-bootstrap-servers"}
		}
		if err := conn.Validate(); err != nil {
			return kafka.Connection{}, &Error{Message: "the manager's default Kafka connection: " + err.Error()}
		}
		return conn, nil
	}
	conn := kafka.Connection{BootstrapServers: spec.BootstrapServers}
	read := func(name, key string, limit int) ([]byte, error) {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &Error{Missing: true, Message: fmt.Sprintf("Secret %q not found", name)}
			}
			return nil, err
		}
		v, ok := s.Data[key]
		if !ok || len(v) == 0 {
			return nil, &Error{Missing: true, Message: fmt.Sprintf("Secret %q has no key %q", name, key)}
		}
		if len(v) > limit {
			return nil, &Error{Message: fmt.Sprintf("Secret %q key %q holds %d bytes, more than %d", name, key, len(v), limit)}
		}
		return v, nil
	}
	if spec.TLS != nil {
		t := &kafka.TLSConfig{ServerName: spec.TLS.ServerName}
		if ref := spec.TLS.CASecretRef; ref != nil {
			key := ref.Key
			if key == "" {
				key = secretKeyCA
			}
			ca, err := read(ref.Name, key, maxSecretCA)
			if err != nil {
				return kafka.Connection{}, err
			}
			// The certificates alone, encoded again; the pods read the Secret itself.
			if t.CAPEM, err = kafka.CABundle(ca); err != nil {
				return kafka.Connection{}, &Error{Message: fmt.Sprintf("Secret %q key %q: TLS CA bundle: %v", ref.Name, key, err)}
			}
		}
		if ref := spec.TLS.ClientCertSecretRef; ref != nil {
			cert, err := read(ref.Name, secretKeyCert, maxSecretCert)
			if err != nil {
				return kafka.Connection{}, err
			}
			key, err := read(ref.Name, secretKeyKey, maxSecretCert)
			if err != nil {
				return kafka.Connection{}, err
			}
			t.CertPEM, t.KeyPEM = cert, key
		}
		conn.TLS = t
	}
	if spec.SASL != nil {
		user, err := read(spec.SASL.SecretRef.Name, secretKeyUsername, maxSecretCredential)
		if err != nil {
			return kafka.Connection{}, err
		}
		pass, err := read(spec.SASL.SecretRef.Name, secretKeyPassword, maxSecretCredential)
		if err != nil {
			return kafka.Connection{}, err
		}
		conn.SASL = &kafka.SASLConfig{Mechanism: string(spec.SASL.Mechanism), Username: string(user), Password: string(pass),
			AllowPlaintext: spec.SASL.PlaintextPassword == retryv1alpha1.PlaintextPasswordAllow}
	}
	if err := conn.Validate(); err != nil {
		// Validate's messages never contain a secret.
		return kafka.Connection{}, &Error{Message: err.Error()}
	}
	return conn, nil
}
