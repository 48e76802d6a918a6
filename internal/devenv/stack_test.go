package devenv_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// tenantPolicy is a RetryPolicy a tenant writes.
const tenantPolicy = `apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: tenant, namespace: retryops-demo}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 1s, maxDelay: 10s}
  classification: {defaultAction: DeadLetter}
`

// forgedAction is a DeadLetterAction that says someone other than its author asked for it.
const forgedAction = `apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterAction
metadata: {name: forged, namespace: retryops-demo}
spec:
  queue: chatbot-dlq
  action: Resolve
  requestedBy: someone-else
  note: forged
  selector: {reasons: [non_retriable_error]}
`

// TestStackShowsTheTenantsView: on the make dev stack, a user bound to the built-in edit role in the
// demo namespace (kubectl --as) may create a RetryPolicy and list dead letters (the ClusterRoles
// config/rbac aggregates into edit, aggregated by the controller manager), and the API server refuses
// their DeadLetterAction whose requestedBy names someone else (config/admission's policy); and the
// manager serves external.metrics.k8s.io through the aggregator.
func TestStackShowsTheTenantsView(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/manager", "./cmd/dispatcher", "./hack/kafka")
	build.Dir = envtestutil.RepoRoot()
	out, err := build.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), string(out))
	logFile, err := os.Create(filepath.Join(dir, "runner.log"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = logFile.Close() }()
	ctx := context.Background()
	stack, err := devenv.StartStack(ctx, devenv.StackOptions{
		Dir: dir, Bin: bin, DispatcherImage: "ghcr.io/retryops/retry-dispatcher:dev", SharedCluster: true,
		Log: zap.New(zap.WriteTo(logFile)),
	}, t.Logf)
	defer stack.Stop()
	g.Expect(err).NotTo(HaveOccurred())

	const ns, user = "retryops-demo", "jane@example.com"
	c := stack.Env.Client
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "jane-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	})).To(Succeed())
	kubectl := func(stdin string, args ...string) func() (string, error) {
		return func() (string, error) {
			var in []byte
			if stdin != "" {
				in = []byte(stdin)
			}
			return stack.Kubectl(in, append([]string{"--as", user, "-n", ns}, args...)...)
		}
	}

	// RBAC and admission policies take effect asynchronously: each step waits for its answer.
	g.Eventually(kubectl(tenantPolicy, "create", "-f", "-"), time.Minute, 250*time.Millisecond).
		Should(ContainSubstring("retrypolicy.retry.retryops.dev/tenant created"))
	g.Eventually(kubectl("", "get", "deadletters"), 2*time.Minute, 250*time.Millisecond).
		Should(ContainSubstring("No resources found in retryops-demo namespace."))
	var refused string
	g.Eventually(func() error {
		refused, err = kubectl(forgedAction, "create", "-f", "-")()
		return err
	}, time.Minute, 250*time.Millisecond).Should(MatchError(ContainSubstring("ValidatingAdmissionPolicy")))
	t.Logf("refused: %s", refused)
	g.Expect(refused).To(ContainSubstring("spec.requestedBy must be the user creating the action, " + user + ", not someone-else"))

	// The manager serves the pipelines' due lag to the HPA controller (RegisterExternalMetricsAPI).
	g.Eventually(func() (string, error) {
		return stack.Kubectl(nil, "get", "--raw", "/apis/external.metrics.k8s.io/v1beta1/namespaces/"+ns+"/retryops_consumerpipeline_due_lag")
	}, time.Minute, 250*time.Millisecond).Should(ContainSubstring(`"kind":"ExternalMetricValueList"`))
}
