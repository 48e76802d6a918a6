package devenv

// The secured embedded Kafka: a TLS listener, SCRAM-SHA-512 users and the ACLs of config/strimzi,
// as a production cluster (Strimzi's TLS listener with SCRAM KafkaUsers) has them.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// KafkaSecurity is how the embedded Kafka lets clients in.
type KafkaSecurity string

const (
	// KafkaPlaintext: no TLS, no authentication (the default).
	KafkaPlaintext KafkaSecurity = ""
	// KafkaTLS: a TLS listener without client authentication; the manager and the pods verify the
	// broker with the stack's CA and server name.
	KafkaTLS KafkaSecurity = "tls"
	// KafkaSCRAM: a TLS listener with SCRAM-SHA-512 users and the ACLs of config/strimzi enforced.
	// The manager is the operator's user; the pods of a namespace are its consumer user, whose
	// Secret AddConsumer writes; the tests' own clients are a superuser (KafkaOptions).
	KafkaSCRAM KafkaSecurity = "scram"
)

// ConsumerSecretPattern is the stack's --kafka-consumer-secret: a namespace's consumers' Secret and
// Kafka user are both named <namespace>-consumer, as Strimzi names a KafkaUser's Secret after it.
const ConsumerSecretPattern = "{namespace}-consumer"

// KafkaSuperuser is the tests' and the demo's own Kafka user: it creates users and ACLs, produces
// and reads. Neither the manager nor a pod has its password.
const KafkaSuperuser = "retryops-admin"

// kafkaAuth is the secured broker's material, all of it under dir.
type kafkaAuth struct {
	security     KafkaSecurity
	dir          string
	caPEM        []byte
	operatorUser string
	superPass    string
	authLog      string
}

// ConsumerSecretName is the name of namespace's consumer Secret and Kafka user.
func ConsumerSecretName(namespace string) string {
	return strings.ReplaceAll(ConsumerSecretPattern, "{namespace}", namespace)
}

// prepareKafkaAuth writes the certificates, the users file and the operator's password file under
// dir, and returns the broker's extra flags and the manager's.
func prepareKafkaAuth(security KafkaSecurity, dir string, clk clock.PassiveClock) (a *kafkaAuth, kafkaArgs, managerArgs []string, err error) {
	a = &kafkaAuth{security: security, dir: dir}
	switch security {
	case KafkaPlaintext:
		return a, nil, nil, nil
	case KafkaTLS, KafkaSCRAM:
	default:
		return nil, nil, nil, fmt.Errorf("kafka security %q: want %q, %q or %q", security, KafkaPlaintext, KafkaTLS, KafkaSCRAM)
	}
	if a.caPEM, err = writeKafkaPKI(dir, clk); err != nil {
		return nil, nil, nil, err
	}
	kafkaArgs = []string{"--tls-cert-file=" + filepath.Join(dir, "server.crt"), "--tls-key-file=" + filepath.Join(dir, "server.key")}
	managerArgs = []string{"--kafka-tls-ca-file=" + filepath.Join(dir, "ca.crt"), "--kafka-tls-server-name=" + KafkaServerName}
	if security == KafkaTLS {
		return a, kafkaArgs, managerArgs, nil
	}
	op, err := readKafkaUser(operatorKafkaUserFile, "")
	if err != nil {
		return nil, nil, nil, err
	}
	a.operatorUser = op.Metadata.Name
	opPass := randomPassword()
	a.superPass = randomPassword()
	users, err := json.Marshal([]map[string]any{
		{"mechanism": "SCRAM-SHA-512", "user": KafkaSuperuser, "password": a.superPass, "superuser": true},
		{"mechanism": "SCRAM-SHA-512", "user": a.operatorUser, "password": opPass},
	})
	if err != nil {
		return nil, nil, nil, err
	}
	usersFile, passFile := filepath.Join(dir, "users.json"), filepath.Join(dir, "operator.password")
	if err := os.WriteFile(usersFile, users, 0o600); err != nil {
		return nil, nil, nil, err
	}
	if err := os.WriteFile(passFile, []byte(opPass), 0o600); err != nil {
		return nil, nil, nil, err
	}
	a.authLog = filepath.Join(dir, "auth.log")
	if err := os.WriteFile(a.authLog, nil, 0o600); err != nil {
		return nil, nil, nil, err
	}
	kafkaArgs = append(kafkaArgs, "--sasl-users-file="+usersFile, "--acls", "--auth-log="+a.authLog)
	managerArgs = append(managerArgs,
		"--kafka-sasl-mechanism=SCRAM-SHA-512", "--kafka-sasl-username="+a.operatorUser, "--kafka-sasl-password-file="+passFile,
		"--kafka-consumer-secret="+ConsumerSecretPattern,
		// config/strimzi/kafkauser-consumer.yaml grants a namespace's consumers its own prefix only.
		"--topic-prefix={namespace}.")
	return a, kafkaArgs, managerArgs, nil
}

func randomPassword() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// clientOptions are the options of a client of the broker at bootstrap: its TLS and, on the SCRAM
// stack, the superuser.
func (a *kafkaAuth) clientOptions(bootstrap string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(bootstrap)}
	if a == nil || a.security == KafkaPlaintext {
		return opts
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.caPEM)
	opts = append(opts, kgo.DialTLSConfig(&tls.Config{RootCAs: pool, ServerName: KafkaServerName, MinVersion: tls.VersionTLS12}))
	if a.security == KafkaSCRAM {
		opts = append(opts, kgo.SASL(scram.Auth{User: KafkaSuperuser, Pass: a.superPass}.AsSha512Mechanism()))
	}
	return opts
}

// createACLs creates on the broker, as the superuser, the ACLs of the KafkaUser u.
func createACLs(ctx context.Context, adm *kadm.Client, u *kafkaUser) error {
	builders, err := u.aclBuilders()
	if err != nil {
		return err
	}
	for _, b := range builders {
		res, err := adm.CreateACLs(ctx, b)
		if err != nil {
			return fmt.Errorf("creating the ACLs of %s: %w", u.Metadata.Name, err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("creating an ACL of %s on %s %q: %w (%s)", u.Metadata.Name, r.Type, r.Name, r.Err, r.ErrMessage)
			}
		}
	}
	return nil
}

// KafkaOptions returns the options of a client that reaches the stack's broker as the tests' and
// the demo's own user (on the SCRAM stack, a superuser neither the manager nor the pods have),
// followed by extra.
func (s *Stack) KafkaOptions(extra ...kgo.Opt) []kgo.Opt {
	return append(s.kafkaAuth.clientOptions(s.Bootstrap), extra...)
}

// OperatorKafkaUser is the manager's Kafka user on the SCRAM stack ("" otherwise).
func (s *Stack) OperatorKafkaUser() string {
	if s.kafkaAuth == nil {
		return ""
	}
	return s.kafkaAuth.operatorUser
}

// KafkaCA returns the PEM CA that signs the broker's certificate (nil on a plaintext stack).
func (s *Stack) KafkaCA() []byte {
	if s.kafkaAuth == nil {
		return nil
	}
	return s.kafkaAuth.caPEM
}

// AddConsumer gives namespace's consumers their Kafka identity on the SCRAM stack, as a platform
// team does with a Strimzi KafkaUser: the SCRAM-SHA-512 user <namespace>-consumer on the broker with
// the ACLs of config/strimzi/kafkauser-consumer.yaml for that namespace, and its Secret in the
// namespace in the shape Strimzi's User Operator writes (password, sasl.jaas.config; named after the
// user). It returns the user's name.
func (s *Stack) AddConsumer(ctx context.Context, namespace string) (string, error) {
	if s.kafkaAuth == nil || s.kafkaAuth.security != KafkaSCRAM {
		return "", errors.New("AddConsumer needs the SCRAM stack (StackOptions.KafkaSecurity KafkaSCRAM)")
	}
	u, err := readKafkaUser(consumerKafkaUserFile, namespace)
	if err != nil {
		return "", err
	}
	if u.Metadata.Name != ConsumerSecretName(namespace) {
		return "", fmt.Errorf("config/strimzi/%s names the user %s for namespace %s, want %s (the stack's --kafka-consumer-secret %s)",
			consumerKafkaUserFile, u.Metadata.Name, namespace, ConsumerSecretName(namespace), ConsumerSecretPattern)
	}
	cl, err := kgo.NewClient(s.KafkaOptions()...)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	pass := randomPassword()
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: u.Metadata.Name, Mechanism: kadm.ScramSha512, Password: pass}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		return "", fmt.Errorf("adding the Kafka user %s: %w", u.Metadata.Name, err)
	}
	if err := createACLs(ctx, adm, u); err != nil {
		return "", err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: u.Metadata.Name},
		Data: map[string][]byte{
			"password": []byte(pass),
			"sasl.jaas.config": fmt.Appendf(nil, `org.apache.kafka.common.security.scram.ScramLoginModule required username="%s" password="%s";`,
				u.Metadata.Name, pass),
		},
	}
	err = s.Env.Client.Create(ctx, secret)
	if apierrors.IsAlreadyExists(err) {
		existing := &corev1.Secret{}
		if err = s.Env.Client.Get(ctx, client.ObjectKeyFromObject(secret), existing); err == nil {
			existing.Data = secret.Data
			err = s.Env.Client.Update(ctx, existing)
		}
	}
	if err != nil {
		return "", fmt.Errorf("writing the Secret %s/%s: %w", namespace, u.Metadata.Name, err)
	}
	return u.Metadata.Name, nil
}

// KafkaAuthentications returns, in order, the user of every SASL authentication the broker has
// seen (its --auth-log), as the broker saw it. A log that says it is full, or holds a line that is
// not an entry before its last, is an error: authentications it does not show could be anyone's.
func (s *Stack) KafkaAuthentications() ([]string, error) {
	if s.kafkaAuth == nil || s.kafkaAuth.authLog == "" {
		return nil, errors.New("the broker authenticates no one on this stack")
	}
	b, err := os.ReadFile(s.kafkaAuth.authLog)
	if err != nil {
		return nil, err
	}
	return parseAuthLog(s.kafkaAuth.authLog, b)
}

func parseAuthLog(path string, b []byte) ([]string, error) {
	// A last line without its newline is the one the broker is writing now: it is read next time.
	complete := b[:bytes.LastIndexByte(b, '\n')+1]
	var users []string
	for i, line := range bytes.Split(bytes.TrimSuffix(complete, []byte("\n")), []byte("\n")) {
		if len(complete) == 0 {
			break
		}
		var e struct {
			User *string `json:"user"`
			Full bool    `json:"full"`
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		switch err := dec.Decode(&e); {
		case err != nil || e.User == nil:
			return nil, fmt.Errorf("%s line %d is no authentication: %q", path, i+1, line)
		case e.Full:
			return nil, fmt.Errorf("%s is full after %d authentications: later ones went unlogged", path, len(users))
		}
		users = append(users, *e.User)
	}
	return users, nil
}

// grantOperator creates, on the SCRAM stack, the ACLs of config/strimzi/kafkauser-operator.yaml for
// the manager's user, retrying until the broker answers.
func (s *Stack) grantOperator(ctx context.Context) error {
	if s.kafkaAuth.security != KafkaSCRAM {
		return nil
	}
	u, err := readKafkaUser(operatorKafkaUserFile, "")
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(s.KafkaOptions()...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return createACLs(ctx, kadm.NewClient(cl), u)
}

// describe says how the broker lets clients in, for the progress lines.
func (a *kafkaAuth) describe() string {
	switch a.security {
	case KafkaTLS:
		return "TLS as " + KafkaServerName + ", no client authentication"
	case KafkaSCRAM:
		return "TLS as " + KafkaServerName + ", SCRAM-SHA-512 users, the ACLs of config/strimzi enforced"
	default:
		return "plaintext, no authentication"
	}
}

// identities says, for the progress lines, which Kafka user the manager and the pods are.
func (a *kafkaAuth) identities() string {
	if a.security != KafkaSCRAM {
		return ""
	}
	return fmt.Sprintf("; the manager is Kafka user %s, the pods of a namespace are its own user %s from the Secret of that name in it",
		a.operatorUser, ConsumerSecretPattern)
}
