package render_test

import (
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
)

// securedDefault is a default connection with TLS (its own CA and server name), SCRAM and a client
// certificate, and the namespace's consumer Secret in Strimzi's shape.
func securedDefault() *render.DefaultConnection {
	return &render.DefaultConnection{
		TLS: true, CAPEM: []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"), ServerName: "kafka.internal",
		SASLMechanism: retryv1alpha1.SASLScramSHA512, ClientCert: true,
		Identity: &render.ConsumerIdentity{Secret: "shop-consumer", Username: "shop.consumers", PasswordKey: "password", CertKey: "user.crt", KeyKey: "user.key"},
	}
}

// A pipeline on its own cluster whose DeadLetterQueue is on the secured default connection: the
// dead-letter connection gets the default's CA (in the ConfigMap), server name and the namespace's
// identity mounted under dead-letter-kafka/, while the pipeline's own connection keeps its own
// Secrets.
func TestADeadLetterQueueOnTheSecuredDefaultConnection(t *testing.T) {
	g := NewWithT(t)
	in := sinkRefSecretsInputs(t)
	in.DLQ.Spec.Kafka = nil
	in.Default = securedDefault()
	cfg, err := render.Config(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Kafka.BootstrapServers).To(Equal([]string{"kafka-0.kafka:9093", "kafka-1.kafka:9093"}))
	g.Expect(cfg.Kafka.SASL.PasswordFile).To(Equal(render.SecretsDir+"/kafka/sasl/password"), "the pipeline's own Secret")
	const dir = render.SecretsDir + "/dead-letter-kafka"
	g.Expect(cfg.DeadLetterKafka).To(Equal(&config.Kafka{BootstrapServers: in.DefaultBootstrapServers, ClientID: config.DefaultClientID,
		TLS:  &config.TLS{CAFile: render.ConfigDir + "/" + render.CAKey, ServerName: "kafka.internal", CertFile: dir + "/client-cert/tls.crt", KeyFile: dir + "/client-cert/tls.key"},
		SASL: &config.SASL{Mechanism: config.SASLScramSHA512, Username: "shop.consumers", PasswordFile: dir + "/sasl/password"}}))

	cm, err := render.ConfigMap(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Data[render.CAKey]).To(Equal(string(in.Default.CAPEM)), "the dead-letter connection's CA file is in the ConfigMap")
	vols := map[string]corev1.Volume{}
	for _, v := range mustDeployment(t, in).Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	g.Expect(vols[render.ConfigVolume].ConfigMap.Items).To(ContainElement(corev1.KeyToPath{Key: render.CAKey, Path: render.CAKey}))
	g.Expect(vols["retryops-dlq-kafka-sasl"].Secret).To(And(Not(BeNil()), HaveField("SecretName", "shop-consumer"),
		HaveField("Items", Equal([]corev1.KeyToPath{{Key: "password", Path: "password"}}))))
	g.Expect(vols["retryops-dlq-kafka-client-cert"].Secret).To(And(Not(BeNil()), HaveField("SecretName", "shop-consumer"),
		HaveField("Items", Equal([]corev1.KeyToPath{{Key: "user.crt", Path: "tls.crt"}, {Key: "user.key", Path: "tls.key"}}))))
}

// A pipeline whose spec.kafka names the default brokers without TLS or SASL is on a connection of
// its own, not the default one: its DeadLetterQueue on the default connection still gets a
// dead-letter connection with the default's TLS and identity, not the pipeline's bare one.
func TestOwnServersEqualToTheDefaultAreNotTheDefaultConnection(t *testing.T) {
	g := NewWithT(t)
	in := sinkURIInputs(t)
	in.Pipeline.Spec.Kafka = &retryv1alpha1.KafkaConnection{BootstrapServers: in.DefaultBootstrapServers}
	in.Default = securedDefault()
	cfg, err := render.Config(in)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Kafka.TLS).To(BeNil())
	g.Expect(cfg.DeadLetterKafka).NotTo(BeNil())
	g.Expect(cfg.DeadLetterKafka.SASL).To(HaveField("Username", "shop.consumers"))
}

// A default connection that authenticates without the namespace's identity is an error, never a
// config without credentials nor a panic.
func TestADefaultConnectionThatAuthenticatesNeedsAnIdentity(t *testing.T) {
	for name, d := range map[string]*render.DefaultConnection{
		"SASL":               {TLS: true, SASLMechanism: retryv1alpha1.SASLScramSHA256},
		"client certificate": {TLS: true, ClientCert: true},
	} {
		in := sinkURIInputs(t)
		in.Default = d
		if _, err := render.Config(in); err == nil {
			t.Errorf("%s without an identity: no error", name)
		}
	}
}
