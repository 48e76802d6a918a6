package strimzi_test

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafkaspec"
)

const (
	managerOverlay = "config/strimzi/manager"
	samplesOverlay = "config/strimzi/samples"
)

// managerDeployment renders the manager overlay and returns its Deployment, as an object and
// typed, and the manager's flags (name to value).
func managerDeployment(t *testing.T) (*unstructured.Unstructured, *appsv1.Deployment, map[string]string) {
	t.Helper()
	scriptRuns(t, `kubectl apply --server-side -k "$tmp/`+managerOverlay+`"`)
	var found []*unstructured.Unstructured
	for _, o := range kustomize(t, sharedEnv(t), managerOverlay) {
		if o.GetKind() == "Deployment" {
			found = append(found, o)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s: %d Deployments, want 1", managerOverlay, len(found))
	}
	dep := &appsv1.Deployment{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(found[0].Object, dep); err != nil {
		t.Fatal(err)
	}
	flags := map[string]string{}
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[name] = value
	}
	return found[0], dep, flags
}

// mountedSecretKey returns the Secret and key the container's file path comes from, if a volume
// of a Secret with items mounts it.
func mountedSecretKey(pod corev1.PodSpec, path string) (secret, key string) {
	for _, m := range pod.Containers[0].VolumeMounts {
		if filepath.Dir(path) != filepath.Clean(m.MountPath) {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == filepath.Base(path) {
					return v.Secret.SecretName, it.Key
				}
			}
		}
	}
	return "", ""
}

// TestManagerOverlayConnectsAsTheOperatorUser renders config/strimzi/manager as the script applies
// it and checks the manager's flags against the objects the script creates: the bootstrap Service
// and port of the Kafka's TLS listener with SCRAM, the cluster CA and the operator user's password
// mounted from the Secrets the script copies, the consumers' Secret named after the consumer user
// of a namespace, the claim policy its ACLs are written for, and only flags the manager defines.
// The Deployment passes a server-side dry run.
func TestManagerOverlayConnectsAsTheOperatorUser(t *testing.T) {
	g := NewWithT(t)
	obj, dep, flags := managerDeployment(t)
	kafka, _ := kafkaObjects(t)
	operator := kafkaUser(t, operatorUserFile, samplesNamespace)
	consumer := kafkaUser(t, consumerUserFile, samplesNamespace)

	host, port, err := net.SplitHostPort(flags["kafka-bootstrap-servers"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(host).To(Equal(kafka.GetName() + "-kafka-bootstrap." + namespace + ".svc"))
	g.Expect(port).To(Equal(strconv.FormatInt(scramListener(kafka), 10)))
	g.Expect(flags).To(HaveKeyWithValue("kafka-sasl-mechanism", "SCRAM-SHA-512"))
	g.Expect(flags).To(HaveKeyWithValue("kafka-sasl-username", operator.GetName()))
	g.Expect(flags).NotTo(HaveKey("kafka-tls-server-name"), "each broker's certificate names the host dialed")

	pod := dep.Spec.Template.Spec
	secret, key := mountedSecretKey(pod, flags["kafka-tls-ca-file"])
	g.Expect([]string{secret, key}).To(Equal([]string{kafka.GetName() + "-cluster-ca-cert", "ca.crt"}))
	secret, key = mountedSecretKey(pod, flags["kafka-sasl-password-file"])
	g.Expect([]string{secret, key}).To(Equal([]string{operator.GetName(), "password"}))
	scriptRuns(t, `copy_secret kafka `+kafka.GetName()+`-cluster-ca-cert "$OPERATOR_NS"`)
	scriptRuns(t, `copy_secret kafka `+operator.GetName()+` "$OPERATOR_NS"`)

	g.Expect(strings.ReplaceAll(flags["kafka-consumer-secret"], "{namespace}", samplesNamespace)).To(Equal(consumer.GetName()))
	scriptRuns(t, `copy_secret kafka "$SAMPLES_NS-consumer" "$SAMPLES_NS"`)
	prefix := strings.ReplaceAll(flags["topic-prefix"], "{namespace}", samplesNamespace)
	g.Expect(acls(t, consumer)).To(ContainElement(acl{resType: "topic", resource: prefix, prefix: true, ops: []string{"Read", "Write", "Describe"}}))

	// Every flag is one cmd/manager defines (a typo would stop the manager at start).
	src := managerSource(t)
	for name := range flags {
		g.Expect(strings.Contains(src, strconv.Quote(name))).To(BeTrue(), "--%s is no flag of cmd/manager", name)
	}

	dryRun(g, sharedEnv(t), dep.Namespace, obj)
}

// managerSource is cmd/manager's non-test Go source.
func managerSource(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob(repoPath("cmd", "manager", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
	}
	return b.String()
}

// TestSamplesFitTheClaimPolicyAndTheUsers renders config/strimzi/samples as the script applies it
// and checks every topic and group of its queues and pipelines against the manager's claim policy
// (kafkaspec, as the controllers check it) and the two users' ACLs: the consumer user reads the
// source, reads and writes the retry tiers, writes the dead-letter topic and joins the group, and
// may not write the record of decisions; the operator user creates and reads them all. The samples
// as config/samples names them are refused, which is why the overlay exists.
func TestSamplesFitTheClaimPolicyAndTheUsers(t *testing.T) {
	g := NewWithT(t)
	scriptRuns(t, "kubectl apply --server-side -k "+samplesOverlay)
	_, _, flags := managerDeployment(t)
	tenancy := kafkaspec.Tenancy{TopicPrefix: flags["topic-prefix"]}
	consumer := acls(t, kafkaUser(t, consumerUserFile, samplesNamespace))
	operator := acls(t, kafkaUser(t, operatorUserFile, samplesNamespace))
	env := sharedEnv(t)

	refused := func(objs []*unstructured.Unstructured) []error {
		var errs []error
		check := func(err error) {
			if err != nil {
				errs = append(errs, err)
			}
		}
		for _, o := range objs {
			ns := o.GetNamespace()
			switch o.GetKind() {
			case "DeadLetterQueue":
				q := &retryv1alpha1.DeadLetterQueue{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, q)).To(Succeed())
				check(tenancy.CheckClaim(ns, string(q.Spec.Topic.Name)))
			case "ConsumerPipeline":
				p := &retryv1alpha1.ConsumerPipeline{}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p)).To(Succeed())
				check(tenancy.CheckSourceClaim(ns, string(p.Spec.Source.Topic)))
				check(tenancy.CheckClaim(ns, string(p.Spec.Source.Topic)+".retry.1"))
				check(tenancy.CheckGroupClaim(ns, group(p)))
			}
		}
		return errs
	}
	original := kustomize(t, env, "config/samples")
	for _, o := range original {
		o.SetNamespace(samplesNamespace)
	}
	g.Expect(refused(original)).NotTo(BeEmpty(), "config/samples now fits the claim policy: the overlay may go")

	objs := kustomize(t, env, samplesOverlay)
	g.Expect(refused(objs)).To(BeEmpty())
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		g.Expect(o.GetNamespace()).To(Equal(samplesNamespace), "%s %s", o.GetKind(), o.GetName())
		switch o.GetKind() {
		case "DeadLetterQueue":
			topic, _, _ := unstructured.NestedString(o.Object, "spec", "topic", "name")
			g.Expect(allowed(consumer, "topic", topic, "Write")).To(BeTrue(), topic)
			g.Expect(allowed(consumer, "topic", topic+".state", "Write")).To(BeFalse(), "the record of decisions of %s", topic)
			for _, op := range []string{"Create", "Read", "Write", "Delete"} {
				g.Expect(allowed(operator, "topic", topic, op)).To(BeTrue(), "%s %s", op, topic)
				g.Expect(allowed(operator, "topic", topic+".state", op)).To(BeTrue(), "%s %s.state", op, topic)
			}
		case "ConsumerPipeline":
			p := &retryv1alpha1.ConsumerPipeline{}
			g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, p)).To(Succeed())
			src := string(p.Spec.Source.Topic)
			tier := src + ".retry.1"
			g.Expect(allowed(consumer, "topic", src, "Read")).To(BeTrue(), src)
			g.Expect(allowed(consumer, "topic", tier, "Read")).To(BeTrue(), tier)
			g.Expect(allowed(consumer, "topic", tier, "Write")).To(BeTrue(), tier)
			g.Expect(allowed(consumer, "group", group(p), "Read")).To(BeTrue(), group(p))
			g.Expect(allowed(operator, "topic", src, "Create")).To(BeTrue(), src)
			g.Expect(allowed(operator, "topic", tier, "Create")).To(BeTrue(), tier)
			g.Expect(allowed(operator, "group", group(p), "Describe")).To(BeTrue(), group(p))
		}
	}
	g.Expect(kinds).To(HaveKeyWithValue("ConsumerPipeline", 2))
	g.Expect(kinds).To(HaveKeyWithValue("DeadLetterQueue", 1))
}

// group is the pipeline's consumer group: spec.source.consumerGroup or <namespace>.<name>.
func group(p *retryv1alpha1.ConsumerPipeline) string {
	if p.Spec.Source.ConsumerGroup != "" {
		return p.Spec.Source.ConsumerGroup
	}
	return p.Namespace + "." + p.Name
}

// kubectlWaitFor matches the script's waits on a pipeline's Ready reason.
var kubectlWaitFor = regexp.MustCompile(`jsonpath='\{\.status\.conditions\[\?\(@\.type=="Ready"\)\]\.reason\}'=([A-Za-z]+)`)

// TestKindScriptWaitsForReasonsTheAPIHas checks the reason the script waits for before the
// consumer Secret exists is the API's.
func TestKindScriptWaitsForReasonsTheAPIHas(t *testing.T) {
	g := NewWithT(t)
	m := kubectlWaitFor.FindAllStringSubmatch(scriptText(t), -1)
	g.Expect(m).To(HaveLen(1))
	g.Expect(m[0][1]).To(Equal(retryv1alpha1.ReasonKafkaCredentialsMissing))
}
