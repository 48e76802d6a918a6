package dlqui

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dlqtest"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestConsoleOnTheWholeStack runs the built plugin's kubectl dlq ui --no-browser against the real
// thing: envtest's API server with the CRDs, the aggregated deadletters API (internal/dlqapi) over
// kfake, and the manager's controllers running the DeadLetterActions; headless Chromium opens the URL
// it prints, filters by reason, opens a dead letter, replays it to a topic (the real dry run counts
// 1 first), follows the progress to 100% and sees the state Replayed; the record reaches the topic.
func TestConsoleOnTheWholeStack(t *testing.T) {
	g := NewWithT(t)
	chromium := chromiumPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns, queue, topic, target = "shop", "orders-dlq", "shop.orders.dlq", "shop.orders.by-hand"

	ctrl.SetLogger(logr.Discard())
	bin := filepath.Join(t.TempDir(), "kubectl-dlq")
	build := exec.Command("go", "build", "-o", bin, "./cmd/kubectl-dlq")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	stack := dlqtest.Start(ctx, t, target)
	broker, factory, env, c := stack.Broker, stack.Kafka, stack.Env, stack.Env.Client
	q := stack.Queue(ctx, t, ns, queue, topic)
	reasons := []string{headers.ReasonMaxRetriesExceeded, headers.ReasonNonRetriable, headers.ReasonDeadlineExceeded}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	var recs []kafka.ProduceRecord
	for i := range 12 {
		at := t0.Add(time.Duration(i) * time.Minute)
		h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
		recs = append(recs, kafka.ProduceRecord{Key: []byte("order-" + strconv.Itoa(i)), Partition: int32(i % 2), Timestamp: at,
			Value: fmt.Appendf(nil, `{"order":%d,"total":%d.50}`, i, 10+i),
			Headers: []kafka.Header{h(headers.Reason, reasons[i%3]), h(headers.ErrorType, "HTTP503"), h(headers.HTTPStatus, "503"),
				h(headers.ErrorMessage, "POST http://orders-sink/orders: status 503"),
				h(headers.OriginalTimestamp, headers.FormatTime(at.Add(-2*time.Minute))),
				h(headers.Pipeline, ns+"/orders"), h(headers.ConsumerGroup, "orders"), h(headers.Attempts, "6"),
				h(headers.FirstFailure, headers.FormatTime(at.Add(-time.Minute))), h(headers.LastFailure, headers.FormatTime(at)),
				h(headers.OriginalTopic, "shop.orders"), h(headers.OriginalPartition, strconv.Itoa(i%2)), h(headers.OriginalOffset, strconv.Itoa(100+i)),
				h("Idempotency-Key", "order-"+strconv.Itoa(i))}})
	}
	res, err := factory.ProduceRecords(ctx, kafka.Connection{BootstrapServers: broker.ListenAddrs()}, topic, recs)
	g.Expect(err).NotTo(HaveOccurred())
	for _, r := range res {
		g.Expect(r.Err).NotTo(HaveOccurred())
	}
	// the queue's status counts them by reason
	g.Eventually(func() int {
		_ = c.Get(ctx, client.ObjectKeyFromObject(q), q)
		return len(q.Status.Reasons)
	}, time.Minute, 100*time.Millisecond).Should(Equal(3))

	// a non-loopback address is refused: the console acts with the user's credentials
	out, err := exec.CommandContext(ctx, bin, "ui", "--no-browser", "--address", "0.0.0.0:0", "-n", ns, "--kubeconfig", env.Kubeconfig).CombinedOutput()
	var exit *exec.ExitError
	g.Expect(errors.As(err, &exit)).To(BeTrue(), "kubectl dlq ui --address 0.0.0.0:0: %v %s", err, out)
	g.Expect(exit.ExitCode()).To(Equal(3), string(out))
	g.Expect(string(out)).To(ContainSubstring("listens on a loopback address only"))

	// kubectl dlq ui, as a user runs it; the first line it prints names the URL
	ui := exec.CommandContext(ctx, bin, "ui", "--no-browser", "-n", ns, "--kubeconfig", env.Kubeconfig)
	stdout, err := ui.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	var uiErr strings.Builder
	ui.Stderr = &uiErr
	g.Expect(ui.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = ui.Process.Signal(os.Interrupt)
		_ = ui.Wait()
	})
	first, err := bufio.NewReader(stdout).ReadString('\n')
	g.Expect(err).NotTo(HaveOccurred(), "kubectl dlq ui printed nothing: %s", uiErr.String())
	t.Logf("$ kubectl dlq ui --no-browser -n %s\n%s", ns, first)
	i := strings.Index(first, "http://127.0.0.1:")
	g.Expect(i).To(BeNumerically(">=", 0), "no loopback URL in %q", first)
	url := strings.TrimSpace(first[i:])

	b := newBrowser(ctx, t, chromium, t.TempDir())
	b.do("open the URL", chromedp.Navigate(url), chromedp.WaitVisible(css(`section.card`)))
	g.Expect(b.text(`[data-testid=pending]`)).To(Equal("12"))
	b.do("filter by reason", follow(`a[href$="/queues/`+queue+`"]`), chromedp.SetValue(css(`#f-reason`), headers.ReasonNonRetriable),
		follow(`#apply-filter`))
	rows, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('a.letter-link')].map(a => a.textContent)`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rows).To(ConsistOf("1/0", "0/2", "1/3", "0/5"), "the non-retriable dead letters: i%3 == 1")
	b.do("open a dead letter", follow(`a.letter-link[href$="/1/0"]`), chromedp.WaitVisible(css(`#value`)))
	g.Expect(b.text(`#letter-state`)).To(Equal("Pending"))
	g.Expect(b.text(`#value`)).To(ContainSubstring("\n  \"total\": 11.50\n"))
	// the dry run runs in the manager: the confirmation page follows it, then shows its count
	b.do("replay it to a topic", chromedp.SetValue(css(`#to-topic`), target), follow(`#replay`),
		chromedp.WaitVisible(css(`#confirm`)))
	g.Expect(b.text(`#matched`)).To(HavePrefix("1 dead letter would be replayed"))
	b.do("confirm, progress to 100%", follow(`#confirm`),
		waitFor(`document.getElementById('progress').getAttribute('aria-valuenow') === '100' && !document.getElementById('finished').hidden`))
	g.Expect(b.text(`#phase`)).To(Equal("Succeeded"))
	b.do("back to the dead letter", follow(`#back-to-letter`), chromedp.WaitVisible(css(`#letter-state`)))
	g.Expect(b.text(`#letter-state`)).To(Equal("Replayed"))
	g.Expect(b.errs.get()).To(BeEmpty(), "errors in the page")

	adm := kadm.NewClient(must(kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...))))
	t.Cleanup(adm.Close)
	ends, err := adm.ListEndOffsets(ctx, target)
	g.Expect(err).NotTo(HaveOccurred())
	end, _ := ends.Lookup(target, 0)
	g.Expect(end.Offset).To(Equal(int64(1)), "the replayed record reaches the topic")
	var actions retryv1alpha1.DeadLetterActionList
	g.Expect(c.List(ctx, &actions, client.InNamespace(ns))).To(Succeed())
	g.Expect(actions.Items).To(HaveLen(2), "the dry run and the run")
	for _, a := range actions.Items {
		g.Expect(a.Spec.RequestedBy).To(Equal("envtest-admin"), "requestedBy from SelfSubjectReview")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
