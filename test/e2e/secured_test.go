package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/render"
)

// securedRecords is how many records each phase of the secured tests produces: record n%10 == 3
// fails once (a retry tier written and read), n%25 == 0 for good (the dead-letter topic written).
const securedRecords = 100

func securedPermanent(n int) bool { return n%25 == 0 }
func securedTransient(n int) int {
	if n%10 == 3 {
		return 1
	}
	return 0
}

// securedManifests is a namespace with a pipeline on the default connection (no spec.kafka), its
// topics under the claim policy "{namespace}.", delivering to sinkURL.
func securedManifests(ns, sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + ns + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: secured, namespace: ` + ns + `}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 500ms, multiplier: "2", maxDelay: 2s}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: secured-dlq, namespace: ` + ns + `}
spec:
  topic: {name: ` + ns + `.tasks.dlq, partitions: 1}
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: secured, namespace: ` + ns + `}
spec:
  source: {topic: ` + ns + `.tasks, create: {partitions: 2}}
  retryPolicyRef: {name: secured}
  deadLetterQueueRef: {name: secured-dlq}
  sink: {uri: "` + sinkURL + `"}
  replicas: 1
`
}

// securedSink serves a DemoSink failing as securedPermanent and securedTransient say.
func securedSink(t *testing.T) (*devenv.DemoSink, string) {
	sink := &devenv.DemoSink{Permanent: securedPermanent, Transient: securedTransient}
	return sink, "http://" + serveSink(t, sink).Addr().String() + "/tasks"
}

// delivers produces records from..to-1 to ns's source and waits until the sink has every one that
// does not fail for good and the dead-letter topic the others.
func delivers(ctx context.Context, t *testing.T, stack *devenv.Stack, sink *devenv.DemoSink, ns string, from, to int) {
	t.Helper()
	g := NewWithT(t)
	before := sink.Succeeded()
	g.Expect(devenv.Produce(ctx, stack.KafkaOptions(), ns+".tasks", from, to, 0)).To(Succeed())
	ok, dead := 0, 0
	for n := from; n < to; n++ {
		if securedPermanent(n) {
			dead++
		} else {
			ok++
		}
	}
	g.Eventually(sink.Succeeded, 2*time.Minute, 250*time.Millisecond).Should(Equal(before+ok), "records delivered in %s", ns)
	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	g.Eventually(func() (int64, error) {
		ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, ns+".tasks.dlq")
		if err != nil {
			return 0, err
		}
		var sum int64
		ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
		return sum, ends.Error()
	}, 2*time.Minute, 250*time.Millisecond).Should(BeNumerically(">=", dead), "dead letters in %s", ns)
}

// pipelineCondition returns a getter of ns's pipeline's condition typ.
func pipelineCondition(ctx context.Context, c client.Client, ns, typ string) func() (*metav1.Condition, error) {
	return func() (*metav1.Condition, error) {
		p := &retryv1alpha1.ConsumerPipeline{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "secured"}, p); err != nil {
			return nil, err
		}
		cond := meta.FindStatusCondition(p.Status.Conditions, typ)
		if cond != nil && cond.ObservedGeneration != p.Generation {
			return nil, nil
		}
		return cond, nil
	}
}

func deployments(ctx context.Context, c client.Client, ns string) ([]appsv1.Deployment, error) {
	l := &appsv1.DeploymentList{}
	err := c.List(ctx, l, client.InNamespace(ns))
	return l.Items, err
}

// TestSecuredDefaultConnection is the acceptance test of the secured default connection on a TLS listener with SCRAM users and the
// ACLs of config/strimzi: (a) a pipeline without spec.kafka, in a namespace holding its consumers'
// Secret, delivers, and the broker sees its pods authenticate as the namespace's user, never as
// the operator's; (b) the same pipeline in a namespace without the Secret is Ready=False
// (KafkaCredentialsMissing, naming the Secret) with no Deployment, and runs once the Secret exists,
// without an edit; (c) with a wrong password in that Secret its pods are refused, and the pipeline
// says so (KafkaAuthenticationFailed, the broker's error) until the password is right again.
func TestSecuredDefaultConnection(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	started := time.Now()
	stack, dir := startStackWith(t, "ghcr.io/retryops/retry-dispatcher:e2e", devenv.KafkaSCRAM)
	t.Logf("stack up in %s", time.Since(started).Round(time.Millisecond))
	c := stack.Env.Client
	const ns, late = "secured", "secured-late"
	sink, sinkURL := securedSink(t)
	lateSink, lateSinkURL := securedSink(t)

	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	user, err := stack.AddConsumer(ctx, ns)
	g.Expect(err).NotTo(HaveOccurred())
	for n, url := range map[string]string{ns: sinkURL, late: lateSinkURL} {
		out, err := stack.Kubectl([]byte(securedManifests(n, url)), "apply", "--server-side", "-f", "-")
		g.Expect(err).NotTo(HaveOccurred(), out)
	}

	// (a) The pipeline with its namespace's Secret runs and delivers through every topic it uses.
	g.Eventually(pipelineCondition(ctx, c, ns, retryv1alpha1.ConditionReady), 2*time.Minute, 250*time.Millisecond).
		Should(HaveField("Status", metav1.ConditionTrue), "the pipeline in %s never became Ready", ns)
	delivers(ctx, t, stack, sink, ns, 0, securedRecords)

	// (b) The pipeline without a Secret says what to create, and has no Deployment.
	var cond *metav1.Condition
	g.Eventually(func(g Gomega) {
		cond, err = pipelineCondition(ctx, c, late, retryv1alpha1.ConditionReady)()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cond.Reason).To(Equal(retryv1alpha1.ReasonKafkaCredentialsMissing))
	}, time.Minute, 250*time.Millisecond).Should(Succeed())
	t.Logf("%s: Ready=False %s: %s", late, cond.Reason, cond.Message)
	g.Expect(cond.Message).To(And(ContainSubstring(devenv.ConsumerSecretName(late)), ContainSubstring(late), ContainSubstring("password")))
	dr, err := pipelineCondition(ctx, c, late, retryv1alpha1.ConditionDeploymentReady)()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dr).To(And(HaveField("Status", metav1.ConditionFalse), HaveField("Reason", retryv1alpha1.ReasonKafkaCredentialsMissing)))
	g.Expect(deployments(ctx, c, late)).To(BeEmpty())

	// Its Secret (and user) created, it runs without any edit.
	lateUser, err := stack.AddConsumer(ctx, late)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(pipelineCondition(ctx, c, late, retryv1alpha1.ConditionReady), 2*time.Minute, 250*time.Millisecond).
		Should(HaveField("Status", metav1.ConditionTrue), "the pipeline in %s never became Ready once its Secret existed", late)
	delivers(ctx, t, stack, lateSink, late, 0, securedRecords)

	// (c) A wrong password: the namespace's pod is refused; the pipeline says so, with the broker's
	// error, until the right password is back.
	refusedAndBack(ctx, t, stack, late)

	// (a) Who the pods are, from the broker's side. With the manager stopped, every authentication
	// the broker sees is a pod's or the test's own client's: the pipeline's pod, started afresh,
	// authenticates as the namespace's user and records still flow; the operator's user never
	// comes. That user did authenticate while the manager ran: the log is the broker's view.
	stack.Manager.Stop()
	auths, err := stack.KafkaAuthentications()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(auths).To(ContainElement(stack.OperatorKafkaUser()))
	mark := len(auths)
	g.Expect(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns))).To(Succeed())
	delivers(ctx, t, stack, sink, ns, securedRecords, 2*securedRecords)
	auths, err = stack.KafkaAuthentications()
	g.Expect(err).NotTo(HaveOccurred())
	since := auths[mark:]
	t.Logf("authentications after the manager stopped: %d, by %v", len(since), distinct(since))
	g.Expect(since).To(ContainElement(user))
	g.Expect(since).NotTo(ContainElement(stack.OperatorKafkaUser()))
	g.Expect(since).To(HaveEach(BeElementOf(user, lateUser, devenv.KafkaSuperuser)), "only the namespaces' users and the test's own")

	// Nor is the operator's password in any file the runner wrote for a pod (volumes, config).
	opPass, err := os.ReadFile(filepath.Join(dir, "kafka-auth", "operator.password"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filesHolding(t, filepath.Join(dir, "pods"), opPass)).To(BeEmpty())
	t.Logf("TestSecuredDefaultConnection: %s in all", time.Since(started).Round(time.Millisecond))
}

// TestTLSOnlyDefaultConnection: on a TLS listener without client authentication, a pipeline without
// spec.kafka delivers: the stack's CA and server name (the broker's certificate names no IP address)
// reach its pods through its ConfigMap.
func TestTLSOnlyDefaultConnection(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	started := time.Now()
	stack, _ := startStackWith(t, "ghcr.io/retryops/retry-dispatcher:e2e", devenv.KafkaTLS)
	c := stack.Env.Client
	const ns = "tls-only"
	sink, sinkURL := securedSink(t)
	out, err := stack.Kubectl([]byte(securedManifests(ns, sinkURL)), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(pipelineCondition(ctx, c, ns, retryv1alpha1.ConditionReady), 2*time.Minute, 250*time.Millisecond).
		Should(HaveField("Status", metav1.ConditionTrue), "the pipeline never became Ready")
	delivers(ctx, t, stack, sink, ns, 0, securedRecords)

	cm := &corev1.ConfigMap{}
	p := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "secured"}}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: render.ConfigMapName(p)}, cm)).To(Succeed())
	g.Expect(cm.Data).To(HaveKeyWithValue("kafka-ca.crt", string(stack.KafkaCA())))
	var cfg struct {
		Kafka struct {
			TLS struct {
				CAFile     string `json:"caFile"`
				ServerName string `json:"serverName"`
			} `json:"tls"`
			SASL *json.RawMessage `json:"sasl"`
		} `json:"kafka"`
	}
	g.Expect(json.Unmarshal([]byte(cm.Data[render.ConfigKey]), &cfg)).To(Succeed())
	g.Expect(cfg.Kafka.TLS.CAFile).To(Equal("/etc/retryops/kafka-ca.crt"))
	g.Expect(cfg.Kafka.TLS.ServerName).To(Equal(devenv.KafkaServerName))
	g.Expect(cfg.Kafka.SASL).To(BeNil())
	t.Logf("TestTLSOnlyDefaultConnection: %s in all", time.Since(started).Round(time.Millisecond))
}

// refusedAndBack gives ns's consumer Secret a wrong password and restarts its pods: the pipeline's
// DeploymentReady and Ready go False with KafkaAuthenticationFailed and the broker's error (reported
// by the refused pod); with the right password back and the pods restarted, it is Ready again.
func refusedAndBack(ctx context.Context, t *testing.T, stack *devenv.Stack, ns string) {
	t.Helper()
	g := NewWithT(t)
	c := stack.Env.Client
	secret := &corev1.Secret{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: ns, Name: devenv.ConsumerSecretName(ns)}, secret)).To(Succeed())
	right := slices.Clone(secret.Data["password"])
	setPassword := func(p []byte) {
		patched := secret.DeepCopy()
		patched.Data["password"] = p
		g.Expect(c.Patch(ctx, patched, client.MergeFrom(secret))).To(Succeed())
		secret = patched
		g.Expect(c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns))).To(Succeed())
	}
	setPassword([]byte("not-the-password"))
	for _, typ := range []string{retryv1alpha1.ConditionDeploymentReady, retryv1alpha1.ConditionReady} {
		g.Eventually(pipelineCondition(ctx, c, ns, typ), 2*time.Minute, 250*time.Millisecond).Should(And(Not(BeNil()),
			HaveField("Status", metav1.ConditionFalse), HaveField("Reason", retryv1alpha1.ReasonKafkaAuthenticationFailed),
			HaveField("Message", ContainSubstring("consumers cannot authenticate to Kafka"))), "%s of the pipeline in %s", typ, ns)
	}
	cond, err := pipelineCondition(ctx, c, ns, retryv1alpha1.ConditionDeploymentReady)()
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("%s with a wrong password: DeploymentReady=False %s: %s", ns, cond.Reason, cond.Message)
	setPassword(right)
	g.Eventually(pipelineCondition(ctx, c, ns, retryv1alpha1.ConditionReady), 2*time.Minute, 250*time.Millisecond).
		Should(HaveField("Status", metav1.ConditionTrue), "the pipeline in %s never became Ready again with its password back", ns)
}

// distinct returns the distinct strings of s, sorted.
func distinct(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out
}

// filesHolding returns the files under dir whose content holds secret.
func filesHolding(t *testing.T, dir string, secret []byte) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), string(secret)) {
			out = append(out, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
