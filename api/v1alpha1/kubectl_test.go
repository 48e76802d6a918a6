package v1alpha1_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// TestSamplesApplyWithRealKubectl applies config/samples with the real kubectl binary, server-side,
// and reads the field docs back with kubectl explain.
func TestSamplesApplyWithRealKubectl(t *testing.T) {
	g := NewWithT(t)
	if _, err := env.Kubectl(nil, "create", "namespace", "kubectl-samples"); err != nil {
		t.Fatal(err)
	}
	samples := filepath.Join(envtestutil.RepoRoot(), "config", "samples")
	out, err := env.Kubectl(nil, "apply", "--server-side", "--field-manager=retryops-test", "-n", "kubectl-samples", "-k", samples)
	g.Expect(err).NotTo(HaveOccurred())
	for _, want := range []string{
		"retrypolicy.retry.retryops.dev/chatbot serverside-applied",
		"retrypolicy.retry.retryops.dev/grading serverside-applied",
		"retrypolicy.retry.retryops.dev/delegation serverside-applied",
		"retrypolicy.retry.retryops.dev/documents serverside-applied",
		"retrypolicy.retry.retryops.dev/generic-worker serverside-applied",
		"deadletterqueue.retry.retryops.dev/chatbot-dlq serverside-applied",
		"consumerpipeline.retry.retryops.dev/chat serverside-applied",
		"consumerpipeline.retry.retryops.dev/documents serverside-applied",
		"deadletteraction.retry.retryops.dev/chat-replay-incident-42 serverside-applied",
	} {
		g.Expect(out).To(ContainSubstring(want))
	}

	// Every kind is in the retryops category and has its short name.
	out, err = env.Kubectl(nil, "get", "retryops", "-n", "kubectl-samples", "-o", "name")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(strings.Fields(out)).To(HaveLen(9))
	for _, short := range []string{"rp", "dlq", "cpl", "dla"} {
		_, err := env.Kubectl(nil, "get", short, "-n", "kubectl-samples")
		g.Expect(err).NotTo(HaveOccurred())
	}

	// The OpenAPI schema is published a moment after the CRD is established.
	g.Eventually(func() (string, error) {
		return env.Kubectl(nil, "explain", "retrypolicy.spec")
	}, 30*time.Second, 250*time.Millisecond).Should(And(
		ContainSubstring("maxAttempts"),
		ContainSubstring("number of deliveries in all, the first one included"),
		ContainSubstring("circuitBreaker"),
	))
	out, err = env.Kubectl(nil, "explain", "consumerpipeline.spec.sink")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(ContainSubstring("HTTP endpoint the operator's dispatcher delivers each record to"))
}
