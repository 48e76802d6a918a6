package dlqui

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
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
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/controllers"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/dlqapi"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/internal/kafkaspec"
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

	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, target))
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(broker.Close)
	factory := franz.NewFactory(franz.WithRequestTimeout(30 * time.Second))
	t.Cleanup(factory.Close)
	env, err := envtestutil.StartAggregated()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = env.Stop() })
	c := env.Client

	// the manager: the controllers and the deadletters API, as cmd/manager wires them
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: envtestutil.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"},
		Cache: controllers.CacheOptions(nil)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(controllers.SetupWithManager(ctx, mgr, controllers.Options{StatusRefreshInterval: time.Second, Kafka: factory,
		DefaultBootstrapServers: broker.ListenAddrs()})).To(Succeed())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := int32(lis.Addr().(*net.TCPAddr).Port)
	const svc = "retry-operator-deadletters-api"
	g.Expect(c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: envtestutil.OperatorNamespace, Name: svc},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port, TargetPort: intstr.FromInt32(port)}}}})).To(Succeed())
	g.Expect(c.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": map[string]any{"name": dlqapi.APIServiceName},
		"spec": map[string]any{"group": dlv1.GroupName, "version": "v1alpha1", "groupPriorityMinimum": int64(1000), "versionPriority": int64(15),
			"service": map[string]any{"namespace": envtestutil.OperatorNamespace, "name": svc, "port": int64(port)}},
	}})).To(Succeed())
	g.Expect(mgr.Add(dlqapi.NewServer(dlqapi.Options{Listener: lis, Config: env.Config,
		Certs:   &dlqapi.CertManager{Client: c, Namespace: envtestutil.OperatorNamespace, SecretName: "retry-operator-deadletters-api-tls", Service: svc},
		Storage: &dlqapi.Storage{Queues: &dlqapi.ClientQueues{Reader: c, Secrets: c, Defaults: kafkaspec.Defaults{BootstrapServers: broker.ListenAddrs()}}, Kafka: factory},
	}))).To(Succeed())
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	t.Cleanup(func() { stop(); <-done })

	// the queue and twelve dead letters, written as the dispatcher writes them
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	q := &v1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: queue},
		Spec: v1.DeadLetterQueueSpec{Topic: v1.DeadLetterTopic{Name: topic, Partitions: 2}}}
	g.Expect(c.Create(ctx, q)).To(Succeed())
	g.Eventually(func() bool {
		_ = c.Get(ctx, client.ObjectKeyFromObject(q), q)
		return meta.IsStatusConditionTrue(q.Status.Conditions, v1.ConditionReady) && q.Status.StateTopic != ""
	}, 2*time.Minute, 100*time.Millisecond).Should(BeTrue(), "the queue is not Ready: %+v", q.Status.Conditions)
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
	b.do("filter by reason", follow(`a[href="/queues/`+queue+`"]`), chromedp.SetValue(css(`#f-reason`), headers.ReasonNonRetriable),
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
	var actions v1.DeadLetterActionList
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
