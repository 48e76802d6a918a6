package helm

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// rendered is one values file's rendering, with the manager's Deployment decoded.
type rendered struct {
	objs []*unstructured.Unstructured
	dep  *appsv1.Deployment
	// args and env are the manager container's.
	args []string
	env  map[string]string
}

func (r *rendered) kinds() map[string]int {
	out := map[string]int{}
	for _, u := range r.objs {
		out[u.GetKind()]++
	}
	return out
}

// TestChartRendersEachValuesFile renders the chart with each values file of testdata/values, with
// both helm majors: `helm lint --strict` passes, the objects that matter for the file are there with
// the right content, and the API server accepts every object (a server-side dry run; cert-manager's
// Certificate and Issuer against the minimal CRDs of testdata/crds).
func TestChartRendersEachValuesFile(t *testing.T) {
	for _, tc := range []struct {
		file  string
		check func(g Gomega, r *rendered)
	}{
		{"default.yaml", func(g Gomega, r *rendered) {
			g.Expect(r.kinds()).To(HaveKeyWithValue("CustomResourceDefinition", 4))
			g.Expect(r.kinds()).To(HaveKeyWithValue("ValidatingAdmissionPolicy", 2))
			g.Expect(r.kinds()).To(HaveKeyWithValue("APIService", 1))
			g.Expect(r.kinds()).NotTo(HaveKey("NetworkPolicy"))
			g.Expect(r.kinds()).NotTo(HaveKey("Certificate"))
			for _, u := range r.objs {
				if u.GetKind() == "CustomResourceDefinition" {
					g.Expect(u.GetAnnotations()).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"), u.GetName())
				}
			}
			c := r.dep.Spec.Template.Spec.Containers[0]
			g.Expect(c.Image).To(Equal("ghcr.io/retryops/retry-operator:v0.1.0"))
			g.Expect(r.env).To(HaveKeyWithValue("DISPATCHER_IMAGE", "ghcr.io/retryops/retry-dispatcher:v0.1.0"))
			g.Expect(r.env).To(HaveKeyWithValue("GOMEMLIMIT", "966367641"), "90% of 1Gi")
			g.Expect(r.args).To(ContainElement("--leader-elect"))
			g.Expect(r.args).NotTo(ContainElement(HavePrefix("--deadletters-api-cert-dir")))
			g.Expect(r.args).NotTo(ContainElement(HavePrefix("--alert-")), "the manager's defaults: no rule labels, the project's runbooks")
			g.Expect(keys(r.objs)).NotTo(ContainElement(HaveSuffix("-dashboard")), "the dashboard is opt-in")
		}},
		{"dashboard.yaml", func(g Gomega, r *rendered) {
			want, err := os.ReadFile(dashboardJSON)
			g.Expect(err).NotTo(HaveOccurred())
			cm := find(t, r.objs, "ConfigMap", release+"-retry-operator-dashboard")
			g.Expect(cm.GetNamespace()).To(Equal("monitoring"))
			g.Expect(cm.GetLabels()).To(And(HaveKeyWithValue("grafana_dashboard", "1"), HaveKeyWithValue("team", "platform")))
			g.Expect(cm.GetAnnotations()).To(Equal(map[string]string{"k8s-sidecar-target-directory": "Kafka retries"}))
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			g.Expect(data).To(HaveLen(1))
			g.Expect(data["retry-operator-dashboard.json"]).To(Equal(string(want)), "the ConfigMap holds %s byte for byte", dashboardJSON)
		}},
		{"watch-namespaces.yaml", func(g Gomega, r *rendered) {
			g.Expect(r.args).To(ContainElement("--watch-namespaces=team-a,team-b"))
			var bound []string
			for _, u := range r.objs {
				if u.GetKind() == "RoleBinding" && u.GetName() == release+"-manager-rolebinding" {
					bound = append(bound, u.GetNamespace())
				}
				g.Expect(key(u)).NotTo(Equal("ClusterRoleBinding /"+release+"-manager-rolebinding"), "a cluster-wide binding of the manager's role")
			}
			g.Expect(bound).To(ConsistOf(namespace, "team-a", "team-b"))
		}},
		{"cert-manager.yaml", func(g Gomega, r *rendered) {
			g.Expect(r.kinds()).To(HaveKeyWithValue("Certificate", 1))
			g.Expect(r.kinds()).To(HaveKeyWithValue("Issuer", 1))
			g.Expect(r.kinds()).To(HaveKeyWithValue("APIService", 2))
			cert := findKind(r.objs, "Certificate")
			secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
			dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
			g.Expect(dns).To(ContainElement(release + "-deadletters-api." + namespace + ".svc"))
			for _, u := range r.objs {
				if u.GetKind() == "APIService" {
					g.Expect(u.GetAnnotations()).To(HaveKeyWithValue("cert-manager.io/inject-ca-from", namespace+"/"+cert.GetName()), u.GetName())
				}
			}
			g.Expect(r.args).To(ContainElement("--deadletters-api-cert-dir=/etc/retry-operator/deadletters-api-tls"))
			g.Expect(r.dep.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", secret)))
		}},
		{"no-admission-policies.yaml", func(g Gomega, r *rendered) {
			for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "CustomResourceDefinition", "APIService"} {
				g.Expect(r.kinds()).NotTo(HaveKey(kind))
			}
			g.Expect(r.args).To(ContainElement("--deadletters-api-apiservice=-"), "the manager writes into no APIService")
		}},
		{"private-registry.yaml", func(g Gomega, r *rendered) {
			spec := r.dep.Spec.Template.Spec
			g.Expect(spec.Containers[0].Image).To(Equal("registry.example.com/platform/retry-operator@sha256:" + strings.Repeat("1", 64)))
			g.Expect(r.env).To(HaveKeyWithValue("DISPATCHER_IMAGE", "registry.example.com/platform/retry-dispatcher@sha256:"+strings.Repeat("2", 64)))
			g.Expect(spec.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "registry-example-com"}}))
			g.Expect(spec.ServiceAccountName).To(Equal("retry-operator-sa"))
			g.Expect(find(t, r.objs, "ServiceAccount", "retry-operator-sa").GetAnnotations()).To(HaveKeyWithValue("example.com/role", "retry-operator"))
			for _, u := range r.objs {
				subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
				for _, s := range subjects {
					g.Expect(s).To(HaveKeyWithValue("name", "retry-operator-sa"), key(u))
				}
			}
			g.Expect(spec.NodeSelector).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
			g.Expect(spec.PriorityClassName).To(Equal("system-cluster-critical"))
			g.Expect(r.dep.Spec.Template.Labels).To(HaveKeyWithValue("team", "platform"))
		}},
		{"kafka-secured.yaml", func(g Gomega, r *rendered) {
			g.Expect(r.args).To(ContainElements(
				"--kafka-tls", "--kafka-tls-ca-file=/etc/retry-operator/kafka-tls/ca.crt",
				"--kafka-tls-cert-file=/etc/retry-operator/kafka-tls/user.crt", "--kafka-tls-key-file=/etc/retry-operator/kafka-tls/user.key",
				"--kafka-tls-server-name=kafka.svc", "--kafka-sasl-mechanism=SCRAM-SHA-512", "--kafka-sasl-username=retry-operator",
				"--kafka-sasl-password-file=/etc/retry-operator/kafka-sasl/password", "--kafka-consumer-secret={namespace}-consumer",
				"--topic-prefix={namespace}.", "--group-prefix=", "--kafka-allowed-bootstrap-servers=*.kafka.svc:9093",
				"--require-resource-credentials", "--alert-rule-labels=release=prometheus,team=platform",
				"--alert-runbook-base-url=https://wiki.example.com/platform/retry-runbooks",
				"--leader-election-id=retry-operator-secured", "--zap-log-level=debug", "--status-refresh-interval=1m", "--kafka-request-timeout=20s", "--kafka-admin-batch-window=25ms"))
			g.Expect(strings.Join(r.args, " ")).NotTo(ContainSubstring("password="), "no password on the command line")
			g.Expect(r.env).To(HaveKeyWithValue("KAFKA_BOOTSTRAP_SERVERS", "kafka-0.kafka.svc:9093,kafka-1.kafka.svc:9093"))
			g.Expect(r.env).To(HaveKeyWithValue("GOMEMLIMIT", "1932735283"), "90% of 2Gi")
			g.Expect(r.env).To(HaveKeyWithValue("HTTPS_PROXY", "http://proxy.example.com:3128"))
			g.Expect(r.dep.Spec.Template.Spec.Volumes).To(ConsistOf(
				HaveField("VolumeSource.Secret.SecretName", "kafka-manager-tls"), HaveField("VolumeSource.Secret.SecretName", "kafka-manager-password")))
			g.Expect(*r.dep.Spec.Replicas).To(Equal(int32(2)))
			g.Expect(r.kinds()).To(HaveKeyWithValue("NetworkPolicy", 1))
		}},
	} {
		t.Run(strings.TrimSuffix(tc.file, ".yaml"), func(t *testing.T) {
			values := filepath.Join("testdata", "values", tc.file)
			eachHelm(t, func(t *testing.T, helm string) {
				g := NewWithT(t)
				run(t, nil, helm, "lint", "--strict", chartDir, "--namespace", namespace, "--values", values)
				out, objs := render(t, helm, values)
				r := &rendered{objs: objs, dep: &appsv1.Deployment{}, env: map[string]string{}}
				g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", release+"-controller-manager").Object, r.dep)).To(Succeed())
				c := r.dep.Spec.Template.Spec.Containers[0]
				r.args = c.Args
				for _, e := range c.Env {
					r.env[e.Name] = e.Value
				}
				for _, image := range []string{c.Image, r.env["DISPATCHER_IMAGE"]} {
					g.Expect(image).To(MatchRegexp(`^[^:@]+(:[^:/@]+|@sha256:[0-9a-f]{64})$`), "untagged image")
				}
				g.Expect(string(out)).NotTo(MatchRegexp(`(?m):latest$`))
				tc.check(g, r)
				env := shared.Env(t)
				dry := run(t, out, kubectl(t), "--kubeconfig", env.Kubeconfig, "apply", "--server-side", "--force-conflicts",
					"--field-manager=helm-render-test", "--dry-run=server", "-f", "-")
				g.Expect(regexp.MustCompile(`(?m)\(server dry run\)$`).FindAll(dry, -1)).To(HaveLen(len(objs)), "every object dry-run:\n%s", dry)
			})
		})
	}
}

// TestChartRefusesWhatWouldNotRun: values that would deploy a manager that cannot start, or an
// unpinned image, fail the rendering with a message that names the value.
func TestChartRefusesWhatWouldNotRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"a latest tag", []string{"image.tag=latest"}, "/image/tag"},
		{"a malformed digest", []string{"dispatcherImage.digest=sha256:abc"}, "/dispatcherImage/digest"},
		{"SASL without a user", []string{"kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.secretName=s"}, "kafka.sasl.username is required"},
		{"SASL without a Secret", []string{"kafka.sasl.mechanism=SCRAM-SHA-512", "kafka.sasl.username=u"}, "kafka.sasl.secretName is required"},
		{"a memory limit in an unknown unit", []string{"resources.limits.memory=1.5Gi"}, "resources.limits.memory"},
		{"an unknown value", []string{"replicas=2"}, "replicas"},
		{"a lease namespace that is no namespace", []string{"leaderElection.namespace=Team_A"}, "/leaderElection/namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachHelm(t, func(t *testing.T, helm string) {
				args := []string{"template", release, chartDir, "--namespace", namespace}
				for _, s := range tc.set {
					args = append(args, "--set", s)
				}
				_, err := runErr(nil, helm, args...)
				g := NewWithT(t)
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring(tc.want))
			})
		})
	}
}

func findKind(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind {
			return u
		}
	}
	return nil
}
