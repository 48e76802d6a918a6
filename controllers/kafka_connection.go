package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
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

// indexKafkaSecrets indexes DeadLetterQueues and ConsumerPipelines by the names of the Secrets their
// spec.kafka references, so that a Secret change re-reconciles exactly the resources that use it.
const indexKafkaSecrets = ".spec.kafka.secrets"

// KafkaDefaults is the operator-wide default Kafka connection, used by resources whose spec.kafka
// names no bootstrap servers.
//
// Merging rule: a resource that sets spec.kafka.bootstrapServers gets exactly its own connection (its
// tls and sasl, or none). A resource that does not gets the default bootstrap servers, and for tls and
// sasl its own settings where given and the defaults otherwise.
type KafkaDefaults struct {
	// BootstrapServers are the default seed brokers.
	BootstrapServers []string
	// TLS is the default TLS configuration; nil means plaintext.
	TLS *kafka.TLSConfig
	// SASL is the default SASL configuration; nil means none.
	SASL *kafka.SASLConfig
}

// connectionServers returns the bootstrap servers a KafkaConnection resolves to, without reading
// any Secret. It identifies the cluster for topic claims.
func connectionServers(spec *v1.KafkaConnection, d KafkaDefaults) []string {
	if spec != nil && len(spec.BootstrapServers) > 0 {
		return spec.BootstrapServers
	}
	return d.BootstrapServers
}

// kafkaSecretNames lists the Secrets a KafkaConnection references, sorted and distinct.
func kafkaSecretNames(spec *v1.KafkaConnection) []string {
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

// resolveConnection turns a KafkaConnection, the Secrets it references and the operator defaults into
// a kafka.Connection. A missing Secret or key is a *problem with reason ReferenceNotFound and an
// unusable connection one with reason InvalidSpec; both name what to fix and never a secret's value.
// Other errors come from the API server and are transient.
func resolveConnection(ctx context.Context, c client.Reader, namespace string, spec *v1.KafkaConnection, d KafkaDefaults) (kafka.Connection, error) {
	conn := kafka.Connection{BootstrapServers: connectionServers(spec, d)}
	if spec == nil || len(spec.BootstrapServers) == 0 {
		conn.TLS, conn.SASL = d.TLS, d.SASL
	}
	if len(conn.BootstrapServers) == 0 {
		return kafka.Connection{}, &problem{Reason: v1.ReasonInvalidSpec, Kind: problemUser,
			Message: "no Kafka bootstrap servers: set spec.kafka.bootstrapServers or start the manager with --kafka-bootstrap-servers"}
	}
	read := func(name, key string) ([]byte, error) {
		s := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &problem{Reason: v1.ReasonReferenceNotFound, Kind: problemWaiting,
					Message: fmt.Sprintf("Secret %q not found", name)}
			}
			return nil, err
		}
		v, ok := s.Data[key]
		if !ok || len(v) == 0 {
			return nil, &problem{Reason: v1.ReasonReferenceNotFound, Kind: problemWaiting,
				Message: fmt.Sprintf("Secret %q has no key %q", name, key)}
		}
		return v, nil
	}
	if spec != nil && spec.TLS != nil {
		t := &kafka.TLSConfig{ServerName: spec.TLS.ServerName}
		if ref := spec.TLS.CASecretRef; ref != nil {
			key := ref.Key
			if key == "" {
				key = secretKeyCA
			}
			ca, err := read(ref.Name, key)
			if err != nil {
				return kafka.Connection{}, err
			}
			t.CAPEM = ca
		}
		if ref := spec.TLS.ClientCertSecretRef; ref != nil {
			cert, err := read(ref.Name, secretKeyCert)
			if err != nil {
				return kafka.Connection{}, err
			}
			key, err := read(ref.Name, secretKeyKey)
			if err != nil {
				return kafka.Connection{}, err
			}
			t.CertPEM, t.KeyPEM = cert, key
		}
		conn.TLS = t
	}
	if spec != nil && spec.SASL != nil {
		user, err := read(spec.SASL.SecretRef.Name, secretKeyUsername)
		if err != nil {
			return kafka.Connection{}, err
		}
		pass, err := read(spec.SASL.SecretRef.Name, secretKeyPassword)
		if err != nil {
			return kafka.Connection{}, err
		}
		conn.SASL = &kafka.SASLConfig{Mechanism: string(spec.SASL.Mechanism), Username: string(user), Password: string(pass)}
	}
	if err := conn.Validate(); err != nil {
		// Validate's messages never contain a secret.
		return kafka.Connection{}, &problem{Reason: v1.ReasonInvalidSpec, Kind: problemUser, Message: err.Error()}
	}
	return conn, nil
}

// adminFactory is the part of *kafka.Factory the controllers use.
type adminFactory interface {
	Admin(ctx context.Context, conn kafka.Connection) (kafka.Admin, error)
	Forget(key string) bool
}

var _ adminFactory = (*kafka.Factory)(nil)

// connectionRegistry hands out admin clients and remembers which connection each resource uses, so
// that the client of a connection nobody uses any more (after a Secret rotation changed its Key) is
// closed at once instead of lingering until the factory's idle sweep.
type connectionRegistry struct {
	factory adminFactory

	mu    sync.Mutex
	owner map[string]string // resource ("kind/namespace/name") -> connection key
	users map[string]int    // connection key -> number of resources using it
}

func newConnectionRegistry(f adminFactory) *connectionRegistry {
	return &connectionRegistry{factory: f, owner: map[string]string{}, users: map[string]int{}}
}

// admin returns the admin client of conn for the resource owner and records the use.
func (r *connectionRegistry) admin(ctx context.Context, owner string, conn kafka.Connection) (kafka.Admin, string, error) {
	key := conn.Key()
	r.use(owner, key)
	a, err := r.factory.Admin(ctx, conn)
	if err != nil {
		return nil, key, err
	}
	return a, key, nil
}

func (r *connectionRegistry) use(owner, key string) {
	r.mu.Lock()
	old, had := r.owner[owner]
	if had && old == key {
		r.mu.Unlock()
		return
	}
	r.owner[owner] = key
	r.users[key]++
	forget := had && r.drop(old)
	r.mu.Unlock()
	if forget {
		r.factory.Forget(old)
	}
}

// release forgets owner, closing its client if nobody else uses it.
func (r *connectionRegistry) release(owner string) {
	r.mu.Lock()
	old, had := r.owner[owner]
	delete(r.owner, owner)
	forget := had && r.drop(old)
	r.mu.Unlock()
	if forget {
		r.factory.Forget(old)
	}
}

// drop decrements the users of key and reports whether none are left. r.mu must be held.
func (r *connectionRegistry) drop(key string) bool {
	r.users[key]--
	if r.users[key] > 0 {
		return false
	}
	delete(r.users, key)
	return true
}

// maxConditionMessage bounds the broker error text copied into a condition.
const maxConditionMessage = 1024

// kafkaProblem classifies an error from internal/kafka into a condition reason:
//   - authentication or authorisation failures: KafkaUnauthorized, transient (ACLs and credentials
//     change outside the resource, so the work queue retries with backoff);
//   - unreachable brokers, TLS failures, closed clients and retriable broker codes: KafkaUnavailable,
//     transient;
//   - an invalid connection: InvalidSpec, waiting for a change;
//   - any other broker error code (INVALID_CONFIG, INVALID_REPLICATION_FACTOR, POLICY_VIOLATION...):
//     KafkaRejected, retried at the next resync.
//
// The message is the broker's error text, which internal/kafka guarantees free of the password.
func kafkaProblem(err error) *problem {
	if err == nil {
		return nil
	}
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	msg := truncate(err.Error(), maxConditionMessage)
	var cfg *kafka.ConfigError
	var ke *kerr.Error
	switch {
	case kafka.IsAuthError(err):
		return &problem{Reason: v1.ReasonKafkaUnauthorized, Kind: problemTransient, Message: msg, Err: err}
	case kafka.IsUnreachable(err), kafka.IsTLSError(err), kafka.KindOf(err) == kafka.KindClosed:
		return &problem{Reason: v1.ReasonKafkaUnavailable, Kind: problemTransient, Message: msg, Err: err}
	case errors.As(err, &cfg):
		return &problem{Reason: v1.ReasonInvalidSpec, Kind: problemUser, Message: msg}
	case errors.As(err, &ke) && ke.Retriable:
		return &problem{Reason: v1.ReasonKafkaUnavailable, Kind: problemTransient, Message: msg, Err: err}
	case errors.As(err, &ke):
		return &problem{Reason: v1.ReasonKafkaRejected, Kind: problemWaiting, Message: msg}
	default:
		return &problem{Reason: v1.ReasonKafkaUnavailable, Kind: problemTransient, Message: msg, Err: err}
	}
}

// secretIndexFunc is the index function of indexKafkaSecrets for both kinds.
func secretIndexFunc(o client.Object) []string {
	switch o := o.(type) {
	case *v1.DeadLetterQueue:
		return kafkaSecretNames(o.Spec.Kafka)
	case *v1.ConsumerPipeline:
		return kafkaSecretNames(o.Spec.Kafka)
	}
	return nil
}

// requestsForSecret lists the objects of list's kind in the Secret's namespace that reference it.
func requestsForSecret(ctx context.Context, c client.Reader, secret client.Object, list client.ObjectList) []ctrl.Request {
	if err := c.List(ctx, list, client.InNamespace(secret.GetNamespace()), client.MatchingFields{indexKafkaSecrets: secret.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing the users of a Secret failed", "secret", client.ObjectKeyFromObject(secret))
		return nil
	}
	var out []ctrl.Request
	switch l := list.(type) {
	case *v1.DeadLetterQueueList:
		for i := range l.Items {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&l.Items[i])})
		}
	case *v1.ConsumerPipelineList:
		for i := range l.Items {
			out = append(out, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&l.Items[i])})
		}
	}
	return out
}

// normalizeServers returns the servers lower-cased, trimmed, sorted and distinct: the identity of a
// cluster for topic claims.
func normalizeServers(servers []string) string {
	out := make([]string, 0, len(servers))
	for _, s := range servers {
		out = append(out, strings.ToLower(strings.TrimSpace(s)))
	}
	slices.Sort(out)
	return strings.Join(slices.Compact(out), ",")
}
