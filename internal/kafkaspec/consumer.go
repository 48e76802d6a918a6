package kafkaspec

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The consumers' identity on the default connection.
//
// The manager authenticates to the default cluster as itself; its credentials never reach a pod.
// The pods of a pipeline on the default connection authenticate as their namespace's user instead:
// a Secret of the name --kafka-consumer-secret gives (Defaults.ConsumerSecret, "{namespace}" standing
// for the pipeline's namespace), in the pipeline's namespace, in the shape Strimzi's User Operator
// writes for a KafkaUser: "password" and "sasl.jaas.config" for SCRAM, "user.crt" and "user.key" for
// TLS client authentication (or "tls.crt" and "tls.key", a kubernetes.io/tls Secret). The default
// connection's CA bundle and server name are public and go to every pod as they are.

// Keys of a consumer Secret.
const (
	// ConsumerKeyUsername is the user name, when the Secret holds one (Strimzi's does not: its user is
	// the Secret's name, also in sasl.jaas.config).
	ConsumerKeyUsername = "username"
	// ConsumerKeyPassword is the SASL password.
	ConsumerKeyPassword = "password"
	// ConsumerKeyJAAS is Strimzi's JAAS configuration line, which names the user.
	ConsumerKeyJAAS = "sasl.jaas.config"
	// ConsumerKeyStrimziCert and ConsumerKeyStrimziKey are a Strimzi TLS user's certificate and key.
	ConsumerKeyStrimziCert = "user.crt"
	ConsumerKeyStrimziKey  = "user.key"
)

// NamespacePlaceholder in Defaults.ConsumerSecret stands for the pipeline's namespace.
const NamespacePlaceholder = "{namespace}"

// maxUsernameLength bounds a user name read from a Secret (Kafka has no limit; SCRAM names are short).
const maxUsernameLength = 256

// ConsumerIdentity is the identity the pods of a pipeline on the default connection use: a Secret
// of the pipeline's namespace and the keys the pods mount from it. Names only, never values.
type ConsumerIdentity struct {
	// Secret is the Secret's name.
	Secret string
	// UsernameKey is the key holding the SASL user, mounted as a file; empty when Username is set.
	UsernameKey string
	// Username is the SASL user when the Secret holds no username key (from sasl.jaas.config, or
	// the Secret's name); not a secret.
	Username string
	// PasswordKey is the key holding the SASL password; empty without SASL.
	PasswordKey string
	// CertKey and KeyKey hold the client certificate and key; empty without a client certificate.
	CertKey, KeyKey string
}

// NeedsConsumerIdentity reports whether pods on the default connection must authenticate: it uses
// SASL or a client certificate.
func (d Defaults) NeedsConsumerIdentity() bool {
	return d.SASL != nil || (d.TLS != nil && len(d.TLS.CertPEM) > 0)
}

// ConsumerSecretName is the consumer Secret's name in namespace; empty when none is configured.
func (d Defaults) ConsumerSecretName(namespace string) string {
	return strings.ReplaceAll(d.ConsumerSecret, NamespacePlaceholder, namespace)
}

// CheckConsumerSecret checks a --kafka-consumer-secret value: a Secret name once {namespace} is
// replaced by any namespace.
func CheckConsumerSecret(v string) error {
	if v == "" {
		return nil
	}
	// The longest namespace name, so that the check holds for every namespace.
	name := strings.ReplaceAll(v, NamespacePlaceholder, strings.Repeat("n", validation.DNS1123LabelMaxLength))
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a Secret name (with %s replaced by a namespace): %s", v, NamespacePlaceholder, strings.Join(errs, "; "))
	}
	return nil
}

// jaasUser finds username="..." in a JAAS configuration line; jaasUserKey finds every option named
// username (a key is a run of word characters, as Kafka's JaasConfig tokenizes it).
var (
	jaasUser    = regexp.MustCompile(`(?:^|\s)username\s*=\s*"([^"\\']*)"`)
	jaasUserKey = regexp.MustCompile(`(?:^|[^A-Za-z0-9_$-])username\s*=`)
)

// userFromJAAS returns the user a sasl.jaas.config names: "" when it names none, ok false when it
// cannot be read the way Kafka's own parser reads it (several username options, of which Kafka takes
// the last; one in single quotes or a comment, which Kafka reads differently; escapes) or names a
// user that no condition or log could show as it is.
func userFromJAAS(jaas []byte) (user string, ok bool) {
	switch keys := len(jaasUserKey.FindAllIndex(jaas, 2)); {
	case keys == 0:
		return "", true
	case keys > 1 || bytes.ContainsAny(jaas, "'") || bytes.Contains(jaas, []byte("/*")) || bytes.Contains(jaas, []byte("//")):
		return "", false
	}
	m := jaasUser.FindSubmatch(jaas)
	if m == nil || len(m[1]) == 0 || len(m[1]) > maxUsernameLength || !utf8.Valid(m[1]) ||
		bytes.ContainsFunc(m[1], func(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) }) {
		return "", false
	}
	return string(m[1]), true
}

// ResolveConsumerIdentity reads the consumer Secret of namespace (one uncached GET through c) when
// pods on the default connection must authenticate; nil, nil when they need not. A Secret that is
// missing, or lacks what the default connection needs, is an *Error with Missing set whose message
// says exactly what to create; a manager without --kafka-consumer-secret is an *Error without it.
func ResolveConsumerIdentity(ctx context.Context, c client.Reader, namespace string, d Defaults) (*ConsumerIdentity, error) {
	if !d.NeedsConsumerIdentity() {
		return nil, nil
	}
	needs := d.consumerNeeds()
	if d.ConsumerSecret == "" {
		return nil, &Error{Message: fmt.Sprintf("the default Kafka connection needs %s, and the operator never lends its own to pods: "+
			"start the manager with --kafka-consumer-secret naming the Secret that gives each namespace's consumers theirs, or set spec.kafka (bootstrapServers and its own tls and sasl)", needs)}
	}
	name := d.ConsumerSecretName(namespace)
	keys := d.consumerKeys()
	missing := func(why string) error {
		return &Error{Missing: true, Message: fmt.Sprintf("%s: the default Kafka connection needs %s for this namespace's consumers: "+
			"create Secret %q in namespace %q with %s (a Strimzi KafkaUser's Secret has them), or set spec.kafka", why, needs, name, namespace, keys)}
	}
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, missing(fmt.Sprintf("Secret %q not found", name))
		}
		return nil, err
	}
	has := func(k string) bool { return len(s.Data[k]) > 0 }
	id := &ConsumerIdentity{Secret: name}
	if d.SASL != nil {
		if !has(ConsumerKeyPassword) {
			return nil, missing(fmt.Sprintf("Secret %q has no key %q", name, ConsumerKeyPassword))
		}
		id.PasswordKey = ConsumerKeyPassword
		if has(ConsumerKeyUsername) {
			id.UsernameKey = ConsumerKeyUsername
		} else {
			user, ok := userFromJAAS(s.Data[ConsumerKeyJAAS])
			if !ok {
				return nil, &Error{Missing: true, Message: fmt.Sprintf("Secret %q in namespace %q: the user of %q cannot be read as Kafka reads it "+
					"(one username=\"...\" of at most %d characters, without quotes, escapes, comments or control characters): add key %q holding the user",
					name, namespace, ConsumerKeyJAAS, maxUsernameLength, ConsumerKeyUsername)}
			}
			id.Username = cmp.Or(user, name) // Strimzi names the Secret after the user
		}
	}
	if d.TLS != nil && len(d.TLS.CertPEM) > 0 {
		switch {
		case has(ConsumerKeyStrimziCert) && has(ConsumerKeyStrimziKey):
			id.CertKey, id.KeyKey = ConsumerKeyStrimziCert, ConsumerKeyStrimziKey
		case has(corev1.TLSCertKey) && has(corev1.TLSPrivateKeyKey):
			id.CertKey, id.KeyKey = corev1.TLSCertKey, corev1.TLSPrivateKeyKey
		default:
			return nil, missing(fmt.Sprintf("Secret %q has no client certificate", name))
		}
	}
	return id, nil
}

// consumerNeeds says what the default connection asks of a client, for messages.
func (d Defaults) consumerNeeds() string {
	var needs []string
	if d.SASL != nil {
		needs = append(needs, d.SASL.Mechanism+" credentials")
	}
	if d.TLS != nil && len(d.TLS.CertPEM) > 0 {
		needs = append(needs, "a TLS client certificate")
	}
	return strings.Join(needs, " and ")
}

// consumerKeys lists the keys a consumer Secret needs, for messages.
func (d Defaults) consumerKeys() string {
	var keys []string
	if d.SASL != nil {
		keys = append(keys, fmt.Sprintf("key %q (the user is key %q, else the username of %q, else the Secret's name)", ConsumerKeyPassword, ConsumerKeyUsername, ConsumerKeyJAAS))
	}
	if d.TLS != nil && len(d.TLS.CertPEM) > 0 {
		keys = append(keys, fmt.Sprintf("keys %q and %q (or %q and %q)", ConsumerKeyStrimziCert, ConsumerKeyStrimziKey, corev1.TLSCertKey, corev1.TLSPrivateKeyKey))
	}
	return strings.Join(keys, " and ")
}
