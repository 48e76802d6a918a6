package dlqcli

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

// actions prints the namespace's actions newest first in every format.
func TestActionsTable(t *testing.T) {
	g := NewWithT(t)
	e := startEnv(t)
	ctx := context.Background()
	namespaceWithQueue(t, e, "tables", "orders-dlq")
	var newest time.Time
	// The table orders actions of the same age by name: the three are made again until the API
	// server stamped them within one second (a second boundary between them reorders the table).
	for try := 0; ; try++ {
		newest = createActions(t, e)
		if sameSecond(t, e) || try == 9 {
			break
		}
		g.Expect(e.Client.DeleteAllOf(ctx, &retryv1alpha1.DeadLetterAction{}, client.InNamespace("tables"))).To(Succeed())
		g.Eventually(func() (int, error) {
			l := &retryv1alpha1.DeadLetterActionList{}
			err := e.Client.List(ctx, l, client.InNamespace("tables"))
			return len(l.Items), err
		}, 10*time.Second, 50*time.Millisecond).Should(BeZero())
	}
	now := newest.Add(5*time.Minute + 30*time.Second)
	run := func(args ...string) string {
		r := <-startPlugin(t, e.Kubeconfig, now, false, &syncBuffer{}, append([]string{"-n", "tables", "actions"}, args...)...)
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		return r.stdout
	}
	// created within a second: the same age, then by name
	g.Expect(run()).To(Equal(`NAME        ACTION    QUEUE        MODE     PHASE       PROGRESS   REQUESTED BY   AGE
purge-1     Purge     other-dlq    DryRun   Pending     <none>     alice          5m
replay-1    Replay    orders-dlq   Run      Succeeded   9/10       alice          5m
resolve-1   Resolve   orders-dlq   Run      Pending     <none>     bob            5m
`))
	g.Expect(run("orders-dlq", "-o", "wide", "--no-headers")).To(Equal(`replay-1    Replay    orders-dlq   Run   Succeeded   9/10     alice   5m    10    9     1     0     <none>
resolve-1   Resolve   orders-dlq   Run   Pending     <none>   bob     5m    0     0     0     0     fixed, OPS-1
`))
	csv := run("orders-dlq", "-o", "csv")
	created := newest.UTC().Format(time.RFC3339)
	g.Expect(csv).To(MatchRegexp(`^namespace,name,action,queue,mode,phase,matched,done,skipped,failed,requestedBy,note,created,completed
tables,replay-1,Replay,orders-dlq,Run,Succeeded,10,9,1,0,alice,,[-0-9T:Z]+,
tables,resolve-1,Resolve,orders-dlq,Run,,0,0,0,0,bob,"fixed, OPS-1",[-0-9T:Z]+,
$`), "created about %s", created)
	g.Expect(run("orders-dlq", "-o", "name")).To(Equal("deadletteraction.retry.retryops.dev/replay-1\ndeadletteraction.retry.retryops.dev/resolve-1\n"))
	g.Expect(run("--limit", "1", "-o", "json")).To(And(
		ContainSubstring(`"kind": "DeadLetterActionList"`), ContainSubstring(`"kind": "DeadLetterAction"`), ContainSubstring(`"name": "purge-1"`),
		Not(ContainSubstring(`"name": "replay-1"`))))
	g.Expect(run("-o", "yaml", "--limit", "1")).To(ContainSubstring("kind: DeadLetterAction\n"))
	// as kubectl get: managedFields only with --show-managed-fields (cli-runtime's PrintFlags)
	g.Expect(run("-o", "yaml", "--limit", "1")).NotTo(ContainSubstring("managedFields"))
	g.Expect(run("-o", "json", "--limit", "1", "--show-managed-fields")).To(ContainSubstring(`"managedFields"`))
}

// stats prints the queue's status as counts with bar charts, or as JSON, YAML or CSV.
func TestStats(t *testing.T) {
	g := NewWithT(t)
	e := startEnv(t)
	ctx := context.Background()
	q := namespaceWithQueue(t, e, "stats", "orders-dlq")
	at := func(d time.Duration) *metav1.Time { return &metav1.Time{Time: testNow.Add(-d)} }
	q.Status = retryv1alpha1.DeadLetterQueueStatus{
		Topic: "stats.orders-dlq", Messages: ptr.To[int64](1200), Pending: ptr.To[int64](340),
		OldestMessageTime: at(10 * time.Hour), NewestMessageTime: at(0), OldestPendingTime: at(3 * time.Hour), LastRefreshTime: at(30 * time.Second),
		States:     []retryv1alpha1.NamedCount{{Name: "Pending", Count: 340}, {Name: "Replayed", Count: 800}, {Name: "Resolved", Count: 50}, {Name: "Ignored", Count: 10}},
		Reasons:    []retryv1alpha1.NamedCount{{Name: "max_retries_exceeded", Count: 1000}, {Name: "non_retriable_error", Count: 190}, {Name: "undeliverable", Count: 10}},
		ErrorTypes: []retryv1alpha1.NamedCount{{Name: "timeout", Count: 700}, {Name: "HTTP 503", Count: 500}},
		Pipelines:  []retryv1alpha1.NamedCount{{Name: "stats/orders", Count: 1200}},
	}
	g.Expect(e.Client.Status().Update(ctx, q)).To(Succeed())
	run := func(args ...string) string {
		r := runPlugin(t, e.Kubeconfig, false, append([]string{"-n", "stats", "stats", "orders-dlq"}, args...)...)
		g.Expect(r.code).To(Equal(ExitOK), r.stderr)
		return r.stdout
	}
	g.Expect(run()).To(Equal(`Queue:          stats/orders-dlq (topic stats.orders-dlq)
Dead letters:   1200 held, 340 pending
Oldest pending: 2026-11-23T09:00:00Z (3h ago)
Growth:         2.00/min (held dead letters over the 10h from the oldest to the newest)
Refreshed:      30s ago

STATE      COUNT
Pending    340   ████████▌
Replayed   800   ████████████████████
Resolved   50    █▎
Ignored    10    ▎

REASON                 COUNT
max_retries_exceeded   1000   ████████████████████
non_retriable_error    190    ███▊
undeliverable          10     ▎

ERROR TYPE   COUNT
timeout      700   ████████████████████
HTTP 503     500   ██████████████▎

PIPELINE       COUNT
stats/orders   1200   ████████████████████
`))
	g.Expect(run("-o", "csv")).To(Equal(`dimension,name,count
state,Pending,340
state,Replayed,800
state,Resolved,50
state,Ignored,10
reason,max_retries_exceeded,1000
reason,non_retriable_error,190
reason,undeliverable,10
error-type,timeout,700
error-type,HTTP 503,500
pipeline,stats/orders,1200
`))
	g.Expect(run("-o", "json")).To(And(ContainSubstring(`"growthPerMinute": 2,`), ContainSubstring(`"oldestPending": "2026-11-23T09:00:00Z",`),
		ContainSubstring(`"pending": 340,`)))
	g.Expect(run("-o", "yaml")).To(ContainSubstring("messages: 1200\n"))
}

// createActions makes TestActionsTable's three actions in namespace tables and returns the newest's
// creation time.
func createActions(t *testing.T, e *envtestutil.Env) time.Time {
	g := NewWithT(t)
	ctx := context.Background()
	var newest time.Time
	for _, a := range []*retryv1alpha1.DeadLetterAction{
		{ObjectMeta: metav1.ObjectMeta{Name: "replay-1"}, Spec: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterReplay, RequestedBy: "alice"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "resolve-1"}, Spec: retryv1alpha1.DeadLetterActionSpec{Queue: "orders-dlq", Action: retryv1alpha1.DeadLetterResolve, RequestedBy: "bob", Note: "fixed, OPS-1"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "purge-1"}, Spec: retryv1alpha1.DeadLetterActionSpec{Queue: "other-dlq", Action: retryv1alpha1.DeadLetterPurge, RequestedBy: "alice", Mode: retryv1alpha1.ActionModeDryRun,
			Selector: &retryv1alpha1.DeadLetterSelector{Before: &metav1.Time{Time: testNow}}}},
	} {
		a.Namespace = "tables"
		g.Expect(e.Client.Create(ctx, a)).To(Succeed())
		if a.Name == "replay-1" {
			a.Status = retryv1alpha1.DeadLetterActionStatus{Phase: retryv1alpha1.ActionSucceeded, Matched: 10, Done: 9, Skipped: 1, Progress: "9/10"}
			g.Expect(e.Client.Status().Update(ctx, a)).To(Succeed())
		}
		newest = a.CreationTimestamp.Time
	}
	return newest
}

// sameSecond reports whether the actions of namespace tables were all created in one second.
func sameSecond(t *testing.T, e *envtestutil.Env) bool {
	l := &retryv1alpha1.DeadLetterActionList{}
	NewWithT(t).Expect(e.Client.List(context.Background(), l, client.InNamespace("tables"))).To(Succeed())
	for _, a := range l.Items {
		if !a.CreationTimestamp.Equal(&l.Items[0].CreationTimestamp) {
			return false
		}
	}
	return true
}
