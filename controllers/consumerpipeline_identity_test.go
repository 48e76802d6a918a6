package controllers_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/testutil/kafkatest"
)

// Issue 30: a pipeline on a default connection with TLS and SCRAM, in a namespace without its
// consumer Secret, shows KafkaCredentialsMissing with a message naming what to create, gets no
// ConfigMap and no Deployment, and is looked at again within a resync; once the Secret (in the shape
// a Strimzi KafkaUser's has) exists, the next reconcile makes them: the CA and server name of the
// default connection in the ConfigMap, the namespace's user and its password's key mounted, and
// nothing of the operator's credentials anywhere.
func TestPipelineOnASecuredDefaultConnectionUsesItsNamespacesIdentity(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	const opUser, opPass = "op-admin-user", "operator-Passw0rd-never-lent"
	pki := kafkatest.NewPKI(t, "default-ca")
	secured, err := kfake.NewCluster(ownClusterID(), kfake.NumBrokers(1), kfake.TLS(pki.ServerTLS(t)), kfake.EnableSASL(),
		kfake.Superuser(kafka.MechanismScramSHA512, opUser, opPass))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(secured.Close)

	ns := newNamespace(t)
	g.Expect(env.Client.Create(ctx, backoffPolicy(ns, "once", 1, time.Second, time.Second))).To(Succeed())
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pki.CAPEM)
	adm := kafkaClient(t, kgo.SeedBrokers(secured.ListenAddrs()...), kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: opUser, Pass: opPass}.AsSha512Mechanism()))
	source := ns + ".orders"
	createTopic(t, adm, source, 1)

	q, r := isolatedReconcilers(t, controllers.Options{
		Kafka:                   franz.NewFactory(franz.WithRequestTimeout(kafkaRequestTimeout)),
		DefaultBootstrapServers: secured.ListenAddrs(),
		DefaultKafkaTLS:         &kafka.TLSConfig{CAPEM: pki.CAPEM, ServerName: "127.0.0.1"},
		DefaultKafkaSASL:        &kafka.SASLConfig{Mechanism: kafka.MechanismScramSHA512, Username: opUser, Password: opPass},
		KafkaConsumerSecret:     "{namespace}-consumer",
		StatusRefreshInterval:   resyncInterval,
	})

	// Only this test's reconcilers act on its labelled queue and pipeline, on the secured cluster.
	dlq := newDLQ(ns, "dlq", ns+".dlq")
	dlq.Labels = map[string]string{benchmarkLabel: "true"}
	g.Expect(env.Client.Create(ctx, dlq)).To(Succeed())
	t.Cleanup(func() { letGo(t, dlq) })
	g.Eventually(func() (*metav1.Condition, error) {
		_, _ = q.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(dlq)})
		return dlqReady(dlq)()
	}, wait, poll).Should(isReady())
	p := newPipeline(ns, "orders", source, "once", "dlq")
	p.Labels = map[string]string{benchmarkLabel: "true"}
	g.Expect(env.Client.Create(ctx, p)).To(Succeed())
	t.Cleanup(func() { letGo(t, p) })
	var res ctrl.Result
	reconcile := func() {
		for range 3 {
			res, _ = r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	}
	secretName := ns + "-consumer"
	cmKey := client.ObjectKey{Namespace: ns, Name: render.ConfigMapName(p)}

	reconcile()
	want := `Secret "` + secretName + `" not found: the default Kafka connection needs SCRAM-SHA-512 credentials for this namespace's consumers: ` +
		`create Secret "` + secretName + `" in namespace "` + ns + `" with key "password" (the user is key "username", else the username of "sasl.jaas.config", else the Secret's name) ` +
		`(a Strimzi KafkaUser's Secret has them), or set spec.kafka`
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionDeploymentReady)).To(And(notReady(retryv1alpha1.ReasonKafkaCredentialsMissing), HaveField("Message", want)))
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionReady)).To(And(notReady(retryv1alpha1.ReasonKafkaCredentialsMissing),
		HaveField("Message", retryv1alpha1.ConditionDeploymentReady+": "+want)))
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionTopicsReady)).To(isReady(), "the manager's own connection works")
	g.Expect(consumers(p)).To(BeNil(), "no Deployment whose pods could not connect")
	g.Expect(env.Client.Get(ctx, cmKey, &corev1.ConfigMap{})).NotTo(Succeed(), "no config either")
	g.Expect(res.RequeueAfter).To(And(BeNumerically(">", 0), BeNumerically("<=", resyncInterval)), "Secrets are not watched: looked at again within a resync")

	// The Secret Strimzi's User Operator writes for a KafkaUser named after it, copied here.
	g.Expect(env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName},
		Data: map[string][]byte{"password": []byte("consumer-Passw0rd"),
			"sasl.jaas.config": []byte(`org.apache.kafka.common.security.scram.ScramLoginModule required username="` + ns + `.consumers" password="consumer-Passw0rd";`)},
	})).To(Succeed())
	reconcile()
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionDeploymentReady)).NotTo(HaveField("Reason", retryv1alpha1.ReasonKafkaCredentialsMissing))
	d, err := consumers(p)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).NotTo(BeNil(), "the Deployment once the Secret exists, without an edit to the pipeline")
	cm := &corev1.ConfigMap{}
	g.Expect(env.Client.Get(ctx, cmKey, cm)).To(Succeed())
	g.Expect(cm.Data[render.CAKey]).To(Equal(string(pki.CAPEM)), "the default connection's CA reaches the pods")
	var cfg config.Config
	g.Expect(json.Unmarshal([]byte(cm.Data[render.ConfigKey]), &cfg)).To(Succeed())
	g.Expect(cfg.Kafka.TLS).To(Equal(&config.TLS{CAFile: render.ConfigDir + "/" + render.CAKey, ServerName: "127.0.0.1"}))
	g.Expect(cfg.Kafka.SASL).To(Equal(&config.SASL{Mechanism: config.SASLScramSHA512, Username: ns + ".consumers",
		PasswordFile: render.SecretsDir + "/kafka/sasl/password"}), "the user of sasl.jaas.config")

	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	g.Expect(vols["retryops-kafka-sasl"].Secret).To(And(Not(BeNil()), HaveField("SecretName", secretName),
		HaveField("Items", Equal([]corev1.KeyToPath{{Key: "password", Path: "password"}}))))
	g.Expect(vols[render.ConfigVolume].ConfigMap.Items).To(ContainElement(corev1.KeyToPath{Key: render.CAKey, Path: render.CAKey}))
	for _, o := range []any{cm, d} {
		b, err := json.Marshal(o)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)).NotTo(Or(ContainSubstring(opPass), ContainSubstring(`"`+opUser+`"`)), "nothing of the operator's credentials")
	}
	g.Expect(strings.Contains(cm.Annotations[render.AnnotationSecrets], "kafka.sasl="+secretName+"/password")).To(BeTrue(), cm.Annotations)

	// The Secret deleted under a running pipeline: the Deployment is kept (its pods keep what they
	// mounted) and the condition says so, beside what to create.
	g.Expect(env.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: secretName}})).To(Succeed())
	reconcile()
	g.Expect(meta.FindStatusCondition(p.Status.Conditions, retryv1alpha1.ConditionDeploymentReady)).To(And(notReady(retryv1alpha1.ReasonKafkaCredentialsMissing), HaveField("Message", And(HavePrefix(want),
		HaveSuffix("; until then the Deployment keeps its last config: its running pods keep the credentials they mounted, new pods cannot start")))))
	g.Expect(consumers(p)).NotTo(BeNil(), "the running consumers are left alone")
}
