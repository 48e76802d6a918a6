package dlqcli

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

func mtime(s string) *metav1.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return &metav1.Time{Time: t}
}

// Each action command creates the DeadLetterAction its flags say, requestedBy the user the API
// server sees (SelfSubjectReview), DryRun for --dry-run, and prints its name.
func TestActionCommandsCreateTheActionAsked(t *testing.T) {
	g := NewWithT(t)
	e := startEnv(t)
	ctx := context.Background()
	namespaceWithQueue(t, e, "acts", "orders-dlq")
	// the user of the kubeconfig, as the API server sees it
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	me := review.Status.UserInfo.Username
	g.Expect(me).To(Equal("envtest-admin"))

	for _, tc := range []struct {
		name string
		args []string
		want retryv1alpha1.DeadLetterActionSpec
	}{{
		name: "replay with every selector, a target pipeline and a rate, dry run",
		args: []string{"replay", "orders-dlq", "--reason", "max_retries_exceeded,deadline_exceeded", "--error-type", "timeout",
			"--pipeline", "orders", "--pipeline", "other/billing", "--state", "pending", "--since", "2026-11-23T10:00:00Z", "--until", "1h",
			"--key", "order-1", "--header", "tenant=acme", "--to-pipeline", "orders-v2", "--rate", "50", "--max-records", "500", "--max-replays", "5", "--dry-run"},
		want: retryv1alpha1.DeadLetterActionSpec{
			Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: me, Mode: retryv1alpha1.ActionModeDryRun, MaxReplays: 5,
			MaxRecords: ptr.To[int64](500),
			Target:     &retryv1alpha1.ReplayTarget{Pipeline: "orders-v2"}, Rate: &retryv1alpha1.ReplayRate{RecordsPerSecond: 50},
			Selector: &retryv1alpha1.DeadLetterSelector{
				Reasons: []retryv1alpha1.DeadLetterName{"max_retries_exceeded", "deadline_exceeded"}, ErrorTypes: []retryv1alpha1.DeadLetterName{"timeout"},
				Pipelines: []retryv1alpha1.DeadLetterName{"acts/orders", "other/billing"}, States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterPending},
				After: mtime("2026-11-23T10:00:00Z"), Before: mtime("2026-11-23T11:00:00Z"),
				Keys: []retryv1alpha1.RecordKey{"order-1"}, Headers: []retryv1alpha1.HeaderMatch{{Name: "tenant", Value: "acme"}},
			},
		},
	}, {
		name: "replay of everything pending to a topic",
		args: []string{"replay", "orders-dlq", "--to-topic", "orders.retry-by-hand"},
		want: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: me, Mode: retryv1alpha1.ActionModeRun, MaxReplays: 3,
			Target: &retryv1alpha1.ReplayTarget{Topic: "orders.retry-by-hand"}},
	}, {
		name: "resolve of explicit dead letters with a note",
		args: []string{"resolve", "orders-dlq", "0/42", "3/7", "--note", "re-entered by hand, OPS-123"},
		want: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterResolve, RequestedBy: me, Mode: retryv1alpha1.ActionModeRun, MaxReplays: 3,
			Note: "re-entered by hand, OPS-123", Selector: &retryv1alpha1.DeadLetterSelector{Records: []retryv1alpha1.RecordRef{"0/42", "3/7"}}},
	}, {
		name: "ignore by selectors",
		args: []string{"ignore", "orders-dlq", "--reason", "non_retriable_error", "--key", "test-1", "--key", "test-2", "--note", "load test"},
		want: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterIgnore, RequestedBy: me, Mode: retryv1alpha1.ActionModeRun, MaxReplays: 3,
			Note: "load test", Selector: &retryv1alpha1.DeadLetterSelector{Reasons: []retryv1alpha1.DeadLetterName{"non_retriable_error"}, Keys: []retryv1alpha1.RecordKey{"test-1", "test-2"}}},
	}, {
		name: "purge before 30 days of resolved ones, dry run",
		args: []string{"purge", "orders-dlq", "--before", "30d", "--states", "Resolved,ignored", "--dry-run"},
		want: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterPurge, RequestedBy: me, Mode: retryv1alpha1.ActionModeDryRun, MaxReplays: 3,
			Selector: &retryv1alpha1.DeadLetterSelector{States: []retryv1alpha1.DeadLetterState{retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnored}, Before: mtime("2026-10-24T12:00:00Z")}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := runPlugin(t, e.Kubeconfig, false, append([]string{"-n", "acts", "-o", "name"}, tc.args...)...)
			g.Expect(r.code).To(Equal(ExitOK), r.stderr)
			g.Expect(r.stderr).To(BeEmpty())
			name, ok := strings.CutPrefix(strings.TrimSpace(r.stdout), "deadletteraction.retry.retryops.dev/")
			g.Expect(ok).To(BeTrue(), r.stdout)
			g.Expect(name).To(HavePrefix(strings.ToLower(string(tc.want.Action)) + "-orders-dlq-"))
			got := &retryv1alpha1.DeadLetterAction{}
			g.Expect(e.Client.Get(ctx, client.ObjectKey{Namespace: "acts", Name: name}, got)).To(Succeed())
			if sel := got.Spec.Selector; sel != nil { // times come back in the local zone
				for _, t := range []*metav1.Time{sel.After, sel.Before} {
					if t != nil {
						t.Time = t.UTC()
					}
				}
			}
			g.Expect(got.Spec).To(Equal(tc.want))
		})
	}

	t.Run("the default output names the action and says dry run", func(t *testing.T) {
		g := NewWithT(t)
		r := runPlugin(t, e.Kubeconfig, false, "-n", "acts", "replay", "orders-dlq", "--dry-run")
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(MatchRegexp(`^deadletteraction.retry.retryops.dev/replay-orders-dlq-[a-z0-9]{5} created \(dry run\)\n$`))
	})
}

// Mistakes on the command line, a missing queue and missing rights exit with their codes and say
// what is wrong on stderr, creating nothing.
func TestErrorsExitWithTheirCodes(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	namespaceWithQueue(t, e, "errs", "orders-dlq")
	noRights := userKubeconfig(t, e, "errs", "mallory", nil)
	readOnly := userKubeconfig(t, e, "errs", "reader", []rbacv1.PolicyRule{{
		APIGroups: []string{"retry.retryops.dev"}, Resources: []string{"deadletterqueues", "deadletteractions"}, Verbs: []string{"get", "list", "watch"},
	}})
	for _, tc := range []struct {
		name       string
		kubeconfig string
		args       []string
		code       int
		stderr     string
	}{
		{"resolve without a note", e.Kubeconfig, []string{"resolve", "orders-dlq", "0/1"}, ExitUsage, `error: required flag(s) "note" not set`},
		{"purge without --before", e.Kubeconfig, []string{"purge", "orders-dlq"}, ExitUsage, "error: purge needs --before (for example --before 30d)"},
		{"a bad record", e.Kubeconfig, []string{"resolve", "orders-dlq", "0:1", "--note", "x"}, ExitUsage, `error: "0:1" is not a dead letter: want PARTITION/OFFSET`},
		{"a bad age", e.Kubeconfig, []string{"replay", "orders-dlq", "--since", "yesterday"}, ExitUsage, `error: --since "yesterday": want a duration back from now`},
		{"a bad state", e.Kubeconfig, []string{"replay", "orders-dlq", "--state", "Done"}, ExitUsage, `error: state "Done": want one of Pending, Replayed, Resolved, Ignored`},
		{"no queue", e.Kubeconfig, []string{"stats"}, ExitUsage, "error: QUEUE is required"},
		{"an unknown flag", e.Kubeconfig, []string{"stats", "orders-dlq", "--colour"}, ExitUsage, "error: unknown flag: --colour"},
		{"an unknown command", e.Kubeconfig, []string{"retry", "orders-dlq"}, ExitUsage, `error: unknown command "retry" for "kubectl dlq"`},
		{"both targets", e.Kubeconfig, []string{"replay", "orders-dlq", "--to-topic", "a", "--to-pipeline", "b"}, ExitUsage, "none of the others can be"},
		{"an unknown queue", e.Kubeconfig, []string{"replay", "orders"}, ExitNotFound,
			`error: deadletterqueues.retry.retryops.dev "orders" in namespace "errs" not found (kubectl get dlq -n errs lists the queues)`},
		{"an unknown queue for stats", e.Kubeconfig, []string{"stats", "orders"}, ExitNotFound, `"orders" in namespace "errs" not found`},
		{"no rights at all", noRights, []string{"stats", "orders-dlq"}, ExitError,
			`error: deadletterqueues.retry.retryops.dev "orders-dlq" is forbidden: User "mallory" cannot get resource "deadletterqueues" in API group "retry.retryops.dev" in the namespace "errs" (ask for the RBAC permission`},
		{"no right to list actions", noRights, []string{"actions"}, ExitError, `User "mallory" cannot list resource "deadletteractions"`},
		{"no right to create an action", readOnly, []string{"resolve", "orders-dlq", "0/1", "--note", "x"}, ExitError,
			`User "reader" cannot create resource "deadletteractions" in API group "retry.retryops.dev" in the namespace "errs"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			r := runPlugin(t, tc.kubeconfig, false, append([]string{"-n", "errs"}, tc.args...)...)
			g.Expect(r.code).To(Equal(tc.code), "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			g.Expect(r.stderr).To(ContainSubstring(tc.stderr))
			g.Expect(r.stdout).To(BeEmpty())
		})
	}
	actions := &retryv1alpha1.DeadLetterActionList{}
	NewWithT(t).Expect(e.Client.List(ctx, actions, client.InNamespace("errs"))).To(Succeed())
	NewWithT(t).Expect(actions.Items).To(BeEmpty())
}
