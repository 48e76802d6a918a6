package dlqcli

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// managerSets plays the manager: it waits for the one action of ns and sets its status through
// the status subresource.
func theAction(g Gomega, c client.Client, ns string) *retryv1alpha1.DeadLetterAction {
	list := &retryv1alpha1.DeadLetterActionList{}
	g.Eventually(func() ([]retryv1alpha1.DeadLetterAction, error) {
		err := c.List(context.Background(), list, client.InNamespace(ns))
		return list.Items, err
	}, 30*time.Second, 20*time.Millisecond).Should(HaveLen(1))
	return &list.Items[0]
}

func setStatus(g Gomega, c client.Client, a *retryv1alpha1.DeadLetterAction, status retryv1alpha1.DeadLetterActionStatus) {
	a.Status = status
	g.Expect(c.Status().Update(context.Background(), a)).To(Succeed())
}

// --wait follows the action's status (set here as the manager would) with a progress bar on a
// terminal, then prints the outcome; a Failed action exits 4 with the reason.
func TestWaitFollowsTheActionToItsOutcome(t *testing.T) {
	e := startEnv(t)
	start := metav1.NewTime(time.Date(2026, 11, 23, 11, 0, 0, 0, time.UTC))

	t.Run("succeeded", func(t *testing.T) {
		g := NewWithT(t)
		namespaceWithQueue(t, e, "wait-ok", "orders-dlq")
		stderr := &syncBuffer{}
		done := startPlugin(t, e.Kubeconfig, testNow, true, stderr, "-n", "wait-ok", "replay", "orders-dlq", "--reason", "max_retries_exceeded", "--wait")
		a := theAction(g, e.Client, "wait-ok")
		setStatus(g, e.Client, a, retryv1alpha1.DeadLetterActionStatus{Phase: retryv1alpha1.ActionRunning, Matched: 10, Done: 4, Progress: "4/10", StartTime: &start})
		g.Eventually(stderr.String, 30*time.Second, 20*time.Millisecond).Should(ContainSubstring("[████████████                  ]  40%  4/10  Running"))
		end := metav1.NewTime(start.Add(3 * time.Second))
		setStatus(g, e.Client, a, retryv1alpha1.DeadLetterActionStatus{Phase: retryv1alpha1.ActionSucceeded, Matched: 10, Done: 9, Skipped: 1, Progress: "9/10",
			SkippedReasons: []retryv1alpha1.NamedCount{{Name: "ReplayLimit", Count: 1}}, StartTime: &start, CompletionTime: &end})
		var r result
		g.Eventually(done, 30*time.Second).Should(Receive(&r))
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		ref := "deadletteraction.retry.retryops.dev/" + a.Name
		g.Expect(r.stdout).To(Equal(ref + " created\n" + ref + ` Succeeded in 3s
  matched:  10
  replayed: 9
  skipped:  1 (ReplayLimit 1)
  failed:   0
`))
		g.Expect(r.stderr).To(HaveSuffix("[██████████████████████████████] 100%  10/10  Succeeded\n"))
	})

	t.Run("purge dry run: what it would delete and where it stops", func(t *testing.T) {
		g := NewWithT(t)
		namespaceWithQueue(t, e, "wait-purge", "orders-dlq")
		done := startPlugin(t, e.Kubeconfig, testNow, false, &syncBuffer{}, "-n", "wait-purge", "purge", "orders-dlq", "--before", "30d", "--dry-run", "--wait")
		a := theAction(g, e.Client, "wait-purge")
		end := metav1.NewTime(start.Add(time.Second))
		setStatus(g, e.Client, a, retryv1alpha1.DeadLetterActionStatus{Phase: retryv1alpha1.ActionSucceeded, Matched: 3, Done: 2, Skipped: 1, Progress: "2/3",
			SkippedReasons: []retryv1alpha1.NamedCount{{Name: "Blocked", Count: 1}}, StartTime: &start, CompletionTime: &end,
			MatchedRecords: []retryv1alpha1.RecordRef{"0/0", "0/1", "1/0"}, BlockingRecords: []retryv1alpha1.RecordRef{"1/1"}})
		var r result
		g.Eventually(done, 30*time.Second).Should(Receive(&r))
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		ref := "deadletteraction.retry.retryops.dev/" + a.Name
		g.Expect(r.stdout).To(Equal(ref + " created (dry run)\n" + ref + ` Succeeded in 1s (dry run: nothing was changed)
  matched:          3
  would be deleted: 2
  skipped:          1 (Blocked 1)
  failed:           0
  matched records: 0/0 0/1 1/0
  blocking records (the purge stopped there, per partition): 1/1
`))
		g.Expect(r.stderr).To(BeEmpty(), "no progress bar when stderr is not a terminal")
	})

	t.Run("a user who may not watch actions: read again every second", func(t *testing.T) {
		g := NewWithT(t)
		namespaceWithQueue(t, e, "wait-nowatch", "orders-dlq")
		kubeconfig := userKubeconfig(t, e, "wait-nowatch", "operator", []rbacv1.PolicyRule{
			{APIGroups: []string{"retry.retryops.dev"}, Resources: []string{"deadletteractions"}, Verbs: []string{"create", "get", "list"}},
			{APIGroups: []string{"retry.retryops.dev"}, Resources: []string{"deadletterqueues"}, Verbs: []string{"get"}},
		})
		done := startPlugin(t, kubeconfig, testNow, false, &syncBuffer{}, "-n", "wait-nowatch", "ignore", "orders-dlq", "--reason", "malformed", "--note", "test data", "--wait")
		a := theAction(g, e.Client, "wait-nowatch")
		g.Expect(a.Spec.RequestedBy).To(Equal("operator"))
		setStatus(g, e.Client, a, retryv1alpha1.DeadLetterActionStatus{Phase: retryv1alpha1.ActionSucceeded, Matched: 2, Done: 2, Progress: "2/2"})
		var r result
		g.Eventually(done, 30*time.Second).Should(Receive(&r))
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		g.Expect(r.stdout).To(ContainSubstring("  ignored: 2\n"))
	})

	t.Run("failed", func(t *testing.T) {
		g := NewWithT(t)
		namespaceWithQueue(t, e, "wait-failed", "orders-dlq")
		done := startPlugin(t, e.Kubeconfig, testNow, false, &syncBuffer{}, "-n", "wait-failed", "resolve", "orders-dlq", "0/1", "--note", "done by hand", "--wait")
		a := theAction(g, e.Client, "wait-failed")
		setStatus(g, e.Client, a, retryv1alpha1.DeadLetterActionStatus{Phase: retryv1alpha1.ActionFailed, Matched: 1, Failed: 1, Progress: "0/1",
			Conditions: []metav1.Condition{{Type: retryv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "StateWriteFailed",
				Message: "the record of decisions could not be written", LastTransitionTime: start}}})
		var r result
		g.Eventually(done, 30*time.Second).Should(Receive(&r))
		g.Expect(r.code).To(Equal(ExitActionFailed))
		g.Expect(r.stdout).To(ContainSubstring("  why: StateWriteFailed: the record of decisions could not be written\n"))
		g.Expect(r.stderr).To(Equal("error: deadletteraction.retry.retryops.dev/" + a.Name + " failed: StateWriteFailed: the record of decisions could not be written\n"))
	})
}
