package helm

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestChartArgsAreTheValuesVerbatim: a value the manager takes as a flag reaches it as one argument,
// exactly as written, whatever YAML makes of its characters (": ", " #", a newline): never a
// broken manifest nor an argument of the user's own choosing slipped in. (The values whose
// characters the schema restricts to what the manager accepts, as the topic prefix, cannot hold
// these: TestTheChartRefusesWhatTheManagerRefuses.)
func TestChartArgsAreTheValuesVerbatim(t *testing.T) {
	values := filepath.Join(t.TempDir(), "odd.yaml")
	text := `kafka:
  tls: {enabled: true, secretName: tls, caKey: ca.crt, serverName: "x: y"}
  sasl: {mechanism: PLAIN, username: "svc: admin #1\n- --kafka-allow-plaintext-password", secretName: s, passwordKey: "p: w"}
claimPolicy:
  groupPrefix: "g: #"
leaderElection: {id: "l: 1", namespace: team-a}
`
	if err := os.WriteFile(values, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	eachHelm(t, func(t *testing.T, helm string) {
		g := NewWithT(t)
		_, objs := render(t, helm, values)
		dep := &appsv1.Deployment{}
		g.Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", release+"-controller-manager").Object, dep)).To(Succeed())
		args := dep.Spec.Template.Spec.Containers[0].Args
		g.Expect(args).To(ContainElements(
			"--kafka-tls-server-name=x: y",
			"--kafka-sasl-username=svc: admin #1\n- --kafka-allow-plaintext-password",
			"--kafka-sasl-password-file=/etc/retry-operator/kafka-sasl/p: w",
			"--group-prefix=g: #",
			"--leader-election-id=l: 1", "--leader-election-namespace=team-a"))
		g.Expect(args).NotTo(ContainElement("--kafka-allow-plaintext-password"))
	})
}

// TestChartRefusesLabelsItSets: podLabels or dashboard.labels naming a label the chart sets itself
// (the Deployment's selector among them) is refused by name, rather than rendered as a duplicate key
// that one YAML reader takes as the user's value (a selector that no longer matches) and another
// refuses.
func TestChartRefusesLabelsItSets(t *testing.T) {
	for _, set := range []string{"podLabels.control-plane=x", "podLabels.app\\.kubernetes\\.io/instance=other", "dashboard.enabled=true,dashboard.labels.app\\.kubernetes\\.io/name=x"} {
		t.Run(set, func(t *testing.T) {
			eachHelm(t, func(t *testing.T, helm string) {
				_, err := runErr(nil, helm, "template", release, chartDir, "--namespace", namespace, "--set", set)
				g := NewWithT(t)
				g.Expect(err).To(HaveOccurred())
				g.Expect(err.Error()).To(ContainSubstring("the chart sets label"))
			})
		})
	}
}
