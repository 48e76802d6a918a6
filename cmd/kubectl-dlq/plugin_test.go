package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// run runs a program with env added to the environment and returns stdout, stderr and exit code.
func run(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errOut.String(), 0
	case errors.As(err, &exit):
		return out.String(), errOut.String(), exit.ExitCode()
	default:
		t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
		return "", "", -1
	}
}

// The built plugin on the PATH is what `kubectl dlq` runs: help, an action, the exit codes of a
// missing queue and of a user without rights, and completion of queue names.
func TestKubectlRunsThePlugin(t *testing.T) {
	g := NewWithT(t)
	bin := buildPlugin(t)

	e, err := envtestutil.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = e.Stop() })
	kubectl := kubectlPath(t, e)
	ctx := context.Background()
	g.Expect(e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})).To(Succeed())
	for _, name := range []string{"orders-dlq", "payments-dlq"} {
		g.Expect(e.Client.Create(ctx, &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: retryv1alpha1.DeadLetterQueueSpec{Topic: retryv1alpha1.DeadLetterTopic{Name: retryv1alpha1.TopicName("shop." + name)}}})).To(Succeed())
	}
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "KUBECONFIG=" + e.Kubeconfig}

	stdout, stderr, code := run(t, env, kubectl, "plugin", "list")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stdout).To(ContainSubstring(filepath.Join(bin, "kubectl-dlq")))

	stdout, _, code = run(t, env, kubectl, "dlq", "--help")
	g.Expect(code).To(Equal(0))
	g.Expect(stdout).To(ContainSubstring("  kubectl dlq [command]"))
	stdout, _, _ = run(t, env, kubectl, "dlq", "replay", "--help")
	g.Expect(stdout).To(ContainSubstring("  kubectl dlq replay QUEUE [PARTITION/OFFSET...] [flags]"))
	g.Expect(stdout).To(ContainSubstring("Examples:\n  # Replay what failed with a timeout in the last hour"))

	stdout, stderr, code = run(t, env, kubectl, "dlq", "-n", "shop", "replay", "orders-dlq", "--reason", "max_retries_exceeded", "--dry-run")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stdout).To(MatchRegexp(`^deadletteraction.retry.retryops.dev/replay-orders-dlq-[a-z0-9]{5} created \(dry run\)\n$`))
	actions := &retryv1alpha1.DeadLetterActionList{}
	g.Expect(e.Client.List(ctx, actions, client.InNamespace("shop"))).To(Succeed())
	g.Expect(actions.Items).To(HaveLen(1))
	g.Expect(actions.Items[0].Spec.RequestedBy).To(Equal("envtest-admin"))
	g.Expect(actions.Items[0].Spec.Mode).To(Equal(retryv1alpha1.ActionModeDryRun))

	stdout, stderr, code = run(t, env, kubectl, "dlq", "-n", "shop", "stats", "refunds-dlq")
	g.Expect(code).To(Equal(2))
	g.Expect(stdout).To(BeEmpty())
	g.Expect(stderr).To(Equal("error: deadletterqueues.retry.retryops.dev \"refunds-dlq\" in namespace \"shop\" not found (kubectl get dlq -n shop lists the queues)\n"))

	u, err := e.Environment.AddUser(envtest.User{Name: "mallory"}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	data, err := u.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	mallory := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(mallory, data, 0o600)).To(Succeed())
	_, stderr, code = run(t, []string{env[0], "KUBECONFIG=" + mallory}, kubectl, "dlq", "-n", "shop", "replay", "orders-dlq")
	g.Expect(code).To(Equal(1))
	g.Expect(stderr).To(Equal(`error: deadletterqueues.retry.retryops.dev "orders-dlq" is forbidden: User "mallory" cannot get resource "deadletterqueues" in API group "retry.retryops.dev" in the namespace "shop" (ask for the RBAC permission, or use --context/--namespace)` + "\n"))

	// completion: kubectl completes a plugin's arguments through kubectl_complete-dlq, which calls
	// the plugin's __complete (plugins/kubectl_complete-dlq)
	stdout, stderr, code = run(t, env, filepath.Join(bin, "kubectl-dlq"), "__complete", "-n", "shop", "stats", "")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stdout).To(Equal("orders-dlq\npayments-dlq\n:4\n"))
	stdout, _, _ = run(t, env, filepath.Join(bin, "kubectl-dlq"), "__complete", "-n", "shop", "replay", "or")
	g.Expect(stdout).To(Equal("orders-dlq\n:4\n"))
	stdout, stderr, code = run(t, env, kubectl, "__complete", "dlq", "-n", "shop", "show", "pay")
	g.Expect(code).To(Equal(0), stderr)
	g.Expect(stdout).To(HavePrefix("payments-dlq\n:4\n"))
	stdout, _, code = run(t, env, filepath.Join(bin, "kubectl-dlq"), "completion", "bash")
	g.Expect(code).To(Equal(0))
	g.Expect(stdout).To(ContainSubstring("__start_kubectl-dlq"))
}
