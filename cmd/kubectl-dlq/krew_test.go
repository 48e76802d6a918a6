package main_test

import (
	"os"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// krewPlugin is the part of krew's Plugin (krew.googlecontainertools.github.com/v1alpha2) checked here.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Platforms        []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			Sha256 string `json:"sha256"`
			Files  []struct {
				From string `json:"from"`
				To   string `json:"to"`
			} `json:"files"`
			Bin string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// plugins/dlq.yaml is a krew manifest installing kubectl-dlq (and its completion script) on Linux and
// macOS from the release archives plugins/release.sh builds.
func TestKrewManifest(t *testing.T) {
	g := NewWithT(t)
	b, err := os.ReadFile("../../plugins/dlq.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	var p krewPlugin
	g.Expect(yaml.Unmarshal(b, &p)).To(Succeed())
	g.Expect(p.APIVersion).To(Equal("krew.googlecontainertools.github.com/v1alpha2"))
	g.Expect(p.Kind).To(Equal("Plugin"))
	g.Expect(p.Metadata.Name).To(Equal("dlq"), "kubectl dlq")
	g.Expect(p.Spec.Version).To(MatchRegexp(`^v\d+\.\d+\.\d+$`))
	g.Expect(p.Spec.ShortDescription).NotTo(BeEmpty())
	platforms := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		platforms[pl.Selector.MatchLabels["os"]+"/"+pl.Selector.MatchLabels["arch"]] = true
		g.Expect(pl.URI).To(MatchRegexp(`^https://github\.com/retryops/retry-operator/releases/download/` + regexp.QuoteMeta(p.Spec.Version) +
			`/kubectl-dlq_` + regexp.QuoteMeta(p.Spec.Version) + `_` + pl.Selector.MatchLabels["os"] + `_` + pl.Selector.MatchLabels["arch"] + `\.tar\.gz$`))
		g.Expect(pl.Sha256).To(MatchRegexp(`^[0-9a-f]{64}$`))
		g.Expect(pl.Bin).To(Equal("kubectl-dlq"))
		g.Expect(pl.Files).To(ContainElement(HaveField("From", "kubectl-dlq")))
		g.Expect(pl.Files).To(ContainElement(HaveField("From", "kubectl_complete-dlq")))
	}
	g.Expect(platforms).To(Equal(map[string]bool{"linux/amd64": true, "linux/arm64": true, "darwin/amd64": true, "darwin/arm64": true}))
}
