package helm

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// dashboardJSON is the dashboard `make dashboard` writes, which the chart ships a copy of.
var dashboardJSON = envtestutil.RepoPath("config", "grafana", "retry-operator-dashboard.json")

// TestChartShipsTheGeneratedFiles: files/dashboards and files/argocd hold exactly the files of
// config/grafana and config/argocd (hack/chartgen copies them: `make manifests`, `make dashboard`),
// and the chart's README and NOTES.txt point at the Argo CD snippet.
func TestChartShipsTheGeneratedFiles(t *testing.T) {
	for _, tc := range []struct{ config, chart string }{
		{filepath.Join("config", "grafana", "*.json"), filepath.Join("files", "dashboards")},
		{filepath.Join("config", "argocd", "*.yaml"), filepath.Join("files", "argocd")},
	} {
		t.Run(tc.chart, func(t *testing.T) {
			g := NewWithT(t)
			want, err := filepath.Glob(envtestutil.RepoPath(tc.config))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(want).NotTo(BeEmpty())
			got, err := os.ReadDir(filepath.Join(chartDir, tc.chart))
			g.Expect(err).NotTo(HaveOccurred())
			var names []string
			for _, e := range got {
				names = append(names, e.Name())
			}
			var wantNames []string
			for _, src := range want {
				wantNames = append(wantNames, filepath.Base(src))
				a, err := os.ReadFile(src)
				g.Expect(err).NotTo(HaveOccurred())
				b, err := os.ReadFile(filepath.Join(chartDir, tc.chart, filepath.Base(src)))
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(string(b)).To(Equal(string(a)), "%s/%s is stale: run make manifests dashboard", tc.chart, filepath.Base(src))
			}
			g.Expect(names).To(ConsistOf(wantNames))
		})
	}
	for _, doc := range []string{"README.md", filepath.Join("templates", "NOTES.txt")} {
		b, err := os.ReadFile(filepath.Join(chartDir, doc))
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(string(b)).To(ContainSubstring("files/argocd/argocd-cm.yaml"), doc)
	}
}
