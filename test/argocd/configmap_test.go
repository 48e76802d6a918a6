package argocd_test

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/retryops/retry-operator/config/argocd"
)

// TestGeneratedFilesAreCurrent fails when argocd-cm.yaml or argo-cd-values.yaml no longer match
// the health scripts: run `go run ./config/argocd/gen`.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	for name, render := range map[string]func() ([]byte, error){
		"argocd-cm.yaml": argocd.ConfigMap, "argo-cd-values.yaml": argocd.HelmValues,
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			want, err := render()
			g.Expect(err).NotTo(HaveOccurred())
			got, err := os.ReadFile(filepath.Join("..", "..", "config", "argocd", name))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(got)).To(Equal(string(want)), "stale: run go run ./config/argocd/gen")
		})
	}
}

// TestConfigMapHoldsEachScript: argocd-cm.yaml parses as a ConfigMap whose keys are Argo CD's
// resource.customizations.health.<group>_<Kind> and whose values are the scripts byte for byte, and
// the Helm values hold the same under configs.cm.
func TestConfigMapHoldsEachScript(t *testing.T) {
	g := NewWithT(t)
	b, err := argocd.ConfigMap()
	g.Expect(err).NotTo(HaveOccurred())
	var cm corev1.ConfigMap
	g.Expect(yaml.UnmarshalStrict(b, &cm)).To(Succeed())
	g.Expect(cm.Name).To(Equal("argocd-cm"))
	v, err := argocd.HelmValues()
	g.Expect(err).NotTo(HaveOccurred())
	var values struct {
		Configs struct {
			CM map[string]string `json:"cm"`
		} `json:"configs"`
	}
	g.Expect(yaml.UnmarshalStrict(v, &values)).To(Succeed())

	kinds, err := argocd.Kinds()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(kinds).To(ConsistOf("ConsumerPipeline", "DeadLetterAction", "DeadLetterQueue", "RetryPolicy"))
	want := map[string]string{}
	for _, kind := range kinds {
		script, err := argocd.HealthScript(kind)
		g.Expect(err).NotTo(HaveOccurred())
		want["resource.customizations.health.retry.retryops.dev_"+kind] = script
	}
	g.Expect(cm.Data).To(Equal(want))
	g.Expect(values.Configs.CM).To(Equal(want))
}
