package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kgo"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// lmWait bounds each wait of TestLibraryModeDeadLetters.
const lmWait = time.Minute

// lmDiffer are the columns of `kubectl dlq list -o csv` in which a library-mode consumer's dead
// letter and the dispatcher's differ by nature: where and when each was dead-lettered, by which
// pipeline (and so group), the failure times, the last error's text (a sink's body, a handler's
// error) and the headers, which carry those. Every other column must agree.
var lmDiffer = []string{"offset", "timestamp", "pipeline", "consumerGroup", "errorMessage", "firstFailureTime", "lastFailureTime", "headers"}

// TestLibraryModeDeadLetters: a library-mode consumer run in the test process (retryloop.New with the
// config the operator rendered into its pipeline's ConfigMap; the pipeline's own Deployment has no
// replicas) and the stack's dispatcher fail the same record of one source the same way (503, 503,
// 400). The DeadLetterQueue's status counts both dead letters, and kubectl dlq (list, show) and
// kubectl get deadletters show the library's like the dispatcher's.
func TestLibraryModeDeadLetters(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	l := serveSink(t, http.HandlerFunc(lmSink))
	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	c := stack.Env.Client
	begin := time.Now()
	out, err := stack.Kubectl([]byte(lmManifests("http://"+l.Addr().String()+"/orders")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, name := range []string{lmDispatcher, lmLibrary} {
		p := &retryv1alpha1.ConsumerPipeline{}
		g.Eventually(func() (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Namespace: lmNS, Name: name}, p)
			return meta.IsStatusConditionTrue(p.Status.Conditions, retryv1alpha1.ConditionReady), err
		}).WithTimeout(lmWait).WithPolling(250*time.Millisecond).Should(BeTrue(), "pipeline %s Ready", name)
	}
	d := &appsv1.Deployment{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: lmNS, Name: lmLibrary + "-dispatcher"}, d)).To(Succeed())
	g.Expect(ptr.Deref(d.Spec.Replicas, -1)).To(BeZero(), "only the test's consumer consumes for %s", lmLibrary)
	t.Logf("both pipelines Ready in %s", time.Since(begin).Round(time.Millisecond))

	loop, err := retryloop.New(libraryConfig(t, g, c), lmHandler, retryloop.WithoutHTTP(), retryloop.WithLogger(discard()))
	g.Expect(err).NotTo(HaveOccurred())
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- loop.Run(runCtx) }()
	defer func() {
		cancel()
		g.Eventually(done).WithTimeout(lmWait).Should(Receive(BeNil()), "the loop stops")
	}()
	g.Eventually(loop.Ready).WithTimeout(lmWait).Should(BeTrue(), "the library-mode consumer joined its group")

	cl, err := kgo.NewClient(stack.KafkaOptions()...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	g.Expect(cl.ProduceSync(ctx, &kgo.Record{Topic: lmSource, Key: []byte("order-7"), Value: []byte(`{"sku":"X-1"}`),
		Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("4bf92f3577b34da6")}}}).FirstErr()).To(Succeed())

	// The queue's status counts both, by pipeline and by reason.
	q := &retryv1alpha1.DeadLetterQueue{}
	g.Eventually(func() ([]retryv1alpha1.NamedCount, error) {
		err := c.Get(ctx, client.ObjectKey{Namespace: lmNS, Name: lmQueue}, q)
		return q.Status.Pipelines, err
	}).WithTimeout(lmWait).WithPolling(250 * time.Millisecond).Should(ConsistOf(
		retryv1alpha1.NamedCount{Name: lmNS + "/" + lmDispatcher, Count: 1}, retryv1alpha1.NamedCount{Name: lmNS + "/" + lmLibrary, Count: 1}))
	g.Expect(q.Status.Messages).To(HaveValue(Equal(int64(2))))
	g.Expect(q.Status.Reasons).To(ConsistOf(retryv1alpha1.NamedCount{Name: headers.ReasonNonRetriable, Count: 2}))
	t.Logf("DeadLetterQueue status %s: %d dead letters, by pipeline %v, by reason %v", lmQueue, *q.Status.Messages, q.Status.Pipelines, q.Status.Reasons)

	dlq := plugin(t, g, stack)
	rows := csvRows(g, dlq("list", lmQueue, "-o", "csv"))
	g.Expect(rows).To(HaveLen(2))
	disp, lib := rows[lmNS+"/"+lmDispatcher], rows[lmNS+"/"+lmLibrary]
	g.Expect(disp).NotTo(BeEmpty())
	g.Expect(lib).NotTo(BeEmpty())
	for col, v := range disp {
		if !slices.Contains(lmDiffer, col) {
			g.Expect(lib).To(HaveKeyWithValue(col, v), "column %s", col)
		}
	}
	for _, row := range []map[string]string{disp, lib} {
		g.Expect(row).To(HaveKeyWithValue("reason", headers.ReasonNonRetriable))
		g.Expect(row).To(HaveKeyWithValue("errorType", "HTTP400"))
		g.Expect(row).To(HaveKeyWithValue("attempts", "3"))
		g.Expect(row).To(HaveKeyWithValue("originalTopic", lmSource))
		g.Expect(row["errorMessage"]).To(ContainSubstring(lmRejected))
		g.Expect(row["firstFailureTime"]).NotTo(BeEmpty())
	}
	g.Expect(headerNames(g, lib["headers"])).To(Equal(headerNames(g, disp["headers"])), "the same headers")

	// The table shows the same cells but for the dead letter's name, age and pipeline.
	wide := dlq("list", lmQueue, "-o", "wide")
	t.Logf("kubectl dlq list %s -o wide:\n%s", lmQueue, wide)
	lines := strings.Split(strings.TrimSpace(wide), "\n")
	g.Expect(lines).To(HaveLen(3))
	a, b := strings.Fields(lines[1]), strings.Fields(lines[2])
	g.Expect(len(a)).To(BeNumerically(">=", 11))
	g.Expect(len(b)).To(Equal(len(a)))
	g.Expect(b[2:5]).To(Equal(a[2:5]), "STATE, REASON, ERROR TYPE")
	g.Expect(b[6:10]).To(Equal(a[6:10]), "ATTEMPTS, KEY, HTTP, ORIGINAL")
	g.Expect([]string{a[5], b[5]}).To(ConsistOf(lmNS+"/"+lmDispatcher, lmNS+"/"+lmLibrary))

	show := dlq("show", lmQueue, lib["partition"]+"/"+lib["offset"])
	g.Expect(show).To(And(ContainSubstring(lmNS+"/"+lmLibrary), ContainSubstring(headers.ReasonNonRetriable), ContainSubstring("Pending"), ContainSubstring("trace-id")))
	got, err := stack.Kubectl(nil, "get", "deadletters", "-n", lmNS)
	g.Expect(err).NotTo(HaveOccurred(), got)
	t.Logf("kubectl get deadletters:\n%s", got)
	g.Expect(strings.Count(got, "HTTP400")).To(Equal(2), got)
	t.Logf("from apply to the last check: %s", time.Since(begin).Round(time.Millisecond))
}

// headerNames are the sorted names in the headers column of list -o csv.
func headerNames(g *WithT, col string) []string {
	var hs []struct {
		Name string `json:"name"`
	}
	g.Expect(json.Unmarshal([]byte(col), &hs)).To(Succeed(), col)
	var out []string
	for _, h := range hs {
		out = append(out, h.Name)
	}
	slices.Sort(out)
	return out
}
