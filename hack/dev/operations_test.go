package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/render"
)

// TestDemoSaysWhereTheOperationalPiecesAre: the note `make dev` prints and writes names the
// generated dashboard and the Argo CD snippet (files that exist), and lists the alert rules the
// operator renders for the demo's queue as applied, each with its tier: the escalation to the
// engineering lead among them, at the default thresholds.
func TestDemoSaysWhereTheOperationalPiecesAre(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	demoDir, err := writeDemo(dir, "127.0.0.1:1")
	g.Expect(err).NotTo(HaveOccurred())
	note, path, err := demoOperations(dir, demoDir)
	g.Expect(err).NotTo(HaveOccurred())
	written, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(written)).To(Equal(note))

	for _, f := range []string{dashboardFile, argoCDFile} {
		abs := filepath.Join(envtestutil.RepoRoot(), f)
		g.Expect(abs).To(BeAnExistingFile())
		g.Expect(note).To(ContainSubstring(abs))
	}
	g.Expect(note).To(ContainSubstring("Alert rules of DeadLetterQueue " + demoNamespace + "/" + demoQueue + " (the engineering lead past 1000 dead letters or 168h oldest)"))
	g.Expect(note).To(ContainSubstring("kubectl get configmap " + demoQueue + "-dlq-alerts -n " + demoNamespace))
	tiers := 0
	for _, tier := range render.AlertTiers {
		want := `(?m)^    ` + tier.Alert + ` +severity=` + tier.Severity + `$`
		if tier.Escalation != "" {
			want = `(?m)^    ` + tier.Alert + ` +severity=` + tier.Severity + ` escalation=` + tier.Escalation + `$`
		}
		if regexp.MustCompile(`^DeadLetterQueue`).MatchString(tier.Alert) {
			g.Expect(note).To(MatchRegexp(want), tier.Alert)
			tiers++
		}
	}
	g.Expect(tiers).To(Equal(5), "the queue's five alerts, two of them the escalation")
}
