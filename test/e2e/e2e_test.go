// Package e2e runs the whole loop on the `make dev` harness: the embedded Kafka process, the control
// plane with a controller manager, the manager and the dispatchers as local processes. Resources are
// applied with the real kubectl.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

const (
	records   = 2000
	namespace = "e2e"
)

func permanent(n int) bool { return n%20 == 0 }
func transient(n int) int {
	if n%10 == 3 || n%10 == 7 {
		return 2
	}
	return 0
}

func buildBinaries(t *testing.T, dir string) {
	t.Helper()
	root := envtestutil.RepoRoot()
	for name, pkg := range map[string]string{"manager": "./cmd/manager", "dispatcher": "./cmd/dispatcher", "kafka": "./hack/kafka"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
}

func manifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + namespace + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: e2e, namespace: ` + namespace + `}
spec:
  maxAttempts: 4
  backoff: {initialDelay: 1s, multiplier: "2", maxDelay: 10s, jitter: {mode: Proportional, minPercent: 80, maxPercent: 120}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
  attemptTimeout: 5s
  # Opens only when (nearly) every delivery fails: the transient failures of the main run stay below.
  circuitBreaker: {failureRatioPercent: 95, minimumRequests: 50, window: 5s, openDuration: 2s, halfOpenRequests: 3, closeSuccessPercent: 60}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: e2e-dlq, namespace: ` + namespace + `}
spec:
  topic: {name: e2e-tasks.dlq, partitions: 3}
  deletionPolicy: Retain
  statusRefreshInterval: 2s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: e2e, namespace: ` + namespace + `}
spec:
  source: {topic: e2e-tasks, create: {partitions: 3}}
  retryPolicyRef: {name: e2e}
  deadLetterQueueRef: {name: e2e-dlq}
  sink: {uri: "` + sinkURL + `"}
  replicas: 2
`
}

func TestEndToEnd(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	sink := &devenv.DemoSink{Permanent: permanent, Transient: transient}
	l := serveSink(t, sink)

	stack, _ := startStack(t, "ghcr.io/retryops/retry-dispatcher:e2e")
	c := stack.Env.Client

	out, err := stack.Kubectl([]byte(manifests("http://"+l.Addr().String()+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)

	pipeline := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: namespace}}
	dlq := &retryv1alpha1.DeadLetterQueue{ObjectMeta: metav1.ObjectMeta{Name: "e2e-dlq", Namespace: namespace}}
	ready := func() (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(pipeline), pipeline); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(pipeline.Status.Conditions, retryv1alpha1.ConditionReady), nil
	}
	g.Eventually(ready, 2*time.Minute, 250*time.Millisecond).Should(BeTrue(), "the pipeline never became Ready")

	start := time.Now()
	g.Expect(devenv.Produce(ctx, stack.KafkaOptions(), "e2e-tasks", 0, records, 0)).To(Succeed())
	var wantOK, wantDead int
	for n := range records {
		if permanent(n) {
			wantDead++
		} else {
			wantOK++
		}
	}
	g.Eventually(sink.Succeeded, 3*time.Minute, 250*time.Millisecond).Should(Equal(wantOK))
	t.Logf("%d records delivered and %d refused for good in %s", wantOK, wantDead, time.Since(start).Round(time.Millisecond))

	// Every transient record was retried after the policy's delays (retry 1: [0.8s, 1.2s], retry 2:
	// [1.6s, 2.4s]) and then delivered.
	for n := range records {
		if transient(n) == 0 {
			continue
		}
		at := sink.Attempts(devenv.DemoKey(n))
		g.Expect(at).To(HaveLen(3), "record %d", n)
		g.Expect(at[1].Sub(at[0])).To(BeNumerically(">=", 800*time.Millisecond), "record %d: first retry too early", n)
		g.Expect(at[2].Sub(at[1])).To(BeNumerically(">=", 1600*time.Millisecond), "record %d: second retry too early", n)
	}

	// Every permanent record is in the DLQ, with its context headers.
	cl, err := kgo.NewClient(stack.KafkaOptions(kgo.ConsumeTopics("e2e-tasks.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	g.Expect(err).NotTo(HaveOccurred())
	defer cl.Close()
	dead := map[string]map[string]string{}
	pollCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for len(dead) < wantDead && pollCtx.Err() == nil {
		cl.PollFetches(pollCtx).EachRecord(func(r *kgo.Record) {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			dead[string(r.Key)] = h
		})
	}
	g.Expect(dead).To(HaveLen(wantDead))
	for key, h := range dead {
		n, err := strconv.Atoi(key[len("demo-"):])
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(permanent(n)).To(BeTrue(), "record %d is in the DLQ", n)
		g.Expect(h).To(HaveKeyWithValue("retryops.reason", "non_retriable_error"))
		g.Expect(h).To(HaveKeyWithValue("retryops.original.topic", "e2e-tasks"))
		g.Expect(h).To(HaveKeyWithValue("retryops.pipeline", namespace+"/e2e"))
		g.Expect(h).To(HaveKeyWithValue("retryops.attempts", "1"))
		for _, k := range []string{"retryops.original.partition", "retryops.original.offset", "retryops.original.timestamp",
			"retryops.consumer.group", "retryops.first.failure", "retryops.last.failure", "retryops.error.type", "retryops.error.message"} {
			g.Expect(h).To(HaveKey(k))
		}
	}

	// The DeadLetterQueue status shows exactly that count; the pipeline shows lag 0 and Ready.
	g.Eventually(func() (int64, error) {
		err := c.Get(ctx, client.ObjectKeyFromObject(dlq), dlq)
		return ptr.Deref(dlq.Status.Messages, -1), err
	}, time.Minute, 250*time.Millisecond).Should(Equal(int64(wantDead)))
	g.Eventually(func() (int64, error) {
		_, err := ready()
		return ptr.Deref(pipeline.Status.ConsumerLag, -1), err
	}, time.Minute, 250*time.Millisecond).Should(BeZero())
	g.Expect(ready()).To(BeTrue())
	g.Expect(pipeline.Status.Circuit).To(Equal(retryv1alpha1.CircuitClosed))

	// The operator's gauges, scraped from the manager's metrics endpoint, equal the status values.
	policy := &retryv1alpha1.RetryPolicy{ObjectMeta: metav1.ObjectMeta{Name: "e2e", Namespace: namespace}}
	g.Eventually(func() (map[string]float64, error) {
		for _, obj := range []client.Object{pipeline, dlq, policy} {
			if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return nil, err
			}
		}
		got, err := scrapeGauges(stack.MetricsURL, namespace)
		if err != nil {
			return nil, err
		}
		want := map[string]float64{
			"retryops_deadletterqueue_messages{e2e-dlq}":                                      float64(ptr.Deref(dlq.Status.Messages, -1)),
			"retryops_consumerpipeline_consumer_lag{e2e}":                                     float64(ptr.Deref(pipeline.Status.ConsumerLag, -1)),
			"retryops_consumerpipeline_retry_backlog{e2e}":                                    float64(ptr.Deref(pipeline.Status.RetryBacklog, -1)),
			"retryops_consumerpipeline_dead_letter_messages{e2e}":                             float64(ptr.Deref(pipeline.Status.DeadLetterMessages, -1)),
			"retryops_consumerpipeline_ready_replicas{e2e}":                                   float64(ptr.Deref(pipeline.Status.ReadyReplicas, -1)),
			"retryops_consumerpipeline_circuit_state{e2e}":                                    0,
			"retryops_retrypolicy_dead_letter_messages{e2e}":                                  float64(ptr.Deref(policy.Status.DeadLetterMessages, -1)),
			"retryops_deadletterqueue_messages_by_reason{e2e-dlq,reason=non_retriable_error}": float64(wantDead),
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				delete(got, k)
			}
		}
		if !reflect.DeepEqual(got, want) {
			return got, fmt.Errorf("gauges %v, status %v", got, want)
		}
		return got, nil
	}, time.Minute, 500*time.Millisecond).Should(HaveKeyWithValue("retryops_deadletterqueue_messages{e2e-dlq}", float64(wantDead)))
	out, err = stack.Kubectl(nil, "get", "retryops", "-n", namespace)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("kubectl get retryops -n %s\n%s", namespace, out)

	// The circuit breaker, end to end: with the sink down the dispatchers' breakers open, and the
	// dispatcher processes (with their ServiceAccount's token, as in a pod) report it to the
	// pipeline's status; when the sink is back the breakers close and so does the status.
	circuit := func() (string, error) {
		_, err := ready()
		c := meta.FindStatusCondition(pipeline.Status.Conditions, retryv1alpha1.ConditionCircuitClosed)
		if c == nil {
			return "", err
		}
		return string(pipeline.Status.Circuit) + " " + c.Reason, err
	}
	sink.SetDown(true)
	downAt := time.Now()
	go func() { _ = devenv.Produce(ctx, stack.KafkaOptions(), "e2e-tasks", 100000, 100400, 0) }()
	g.Eventually(circuit, time.Minute, 250*time.Millisecond).Should(Equal("Open CircuitOpen"))
	t.Logf("sink down: the pipeline shows the circuit open after %s", time.Since(downAt).Round(time.Millisecond))
	out, _ = stack.Kubectl(nil, "get", "cpl", "-n", namespace, "-o", "wide")
	t.Logf("kubectl get cpl -o wide\n%s", out)
	sink.SetDown(false)
	upAt := time.Now()
	g.Eventually(circuit, time.Minute, 250*time.Millisecond).Should(Equal("Closed CircuitClosed"))
	g.Expect(ready()).To(BeTrue())
	t.Logf("sink up: the pipeline shows the circuit closed after %s", time.Since(upAt).Round(time.Millisecond))

	// Deleting the pipeline removes its Deployment, ConfigMaps and alert object through garbage
	// collection; the Retain policy keeps the DLQ topic.
	var children []client.Object
	deps := &appsv1.DeploymentList{}
	g.Expect(c.List(ctx, deps, client.InNamespace(namespace))).To(Succeed())
	g.Expect(deps.Items).To(HaveLen(1))
	children = append(children, &deps.Items[0])
	cms := &corev1.ConfigMapList{}
	g.Expect(c.List(ctx, cms, client.InNamespace(namespace))).To(Succeed())
	for i := range cms.Items {
		if len(cms.Items[i].OwnerReferences) > 0 && cms.Items[i].OwnerReferences[0].Kind == "ConsumerPipeline" {
			children = append(children, &cms.Items[i])
		}
	}
	g.Expect(len(children)).To(BeNumerically(">=", 3), "want the Deployment, the config and the circuit ConfigMaps")
	for _, obj := range []client.Object{&corev1.ServiceAccount{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}} {
		obj.SetNamespace(namespace)
		obj.SetName("e2e-dispatcher")
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		children = append(children, obj)
	}
	out, err = stack.Kubectl(nil, "delete", "consumerpipeline", "e2e", "-n", namespace, "--wait=true", "--timeout=60s")
	g.Expect(err).NotTo(HaveOccurred(), out)
	for _, child := range children {
		g.Eventually(func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(child), child))
		}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "%T %s was not garbage-collected", child, child.GetName())
	}
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, "e2e-tasks.dlq")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(topics.Has("e2e-tasks.dlq")).To(BeTrue(), "the Retain policy must keep the DLQ topic")
	fmt.Fprintf(os.Stderr, "e2e: %d records in %s\n", records, time.Since(start).Round(time.Second))
}

// scrapeGauges reads the retryops_* series of namespace from a Prometheus endpoint, keyed
// "<name>{<resource>[,<other label>=<value>...]}".
func scrapeGauges(url, namespace string) (map[string]float64, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, f := range fams {
		if !strings.HasPrefix(name, "retryops_") {
			continue
		}
		for _, m := range f.GetMetric() {
			var resource string
			var others []string
			inNamespace := false
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "namespace":
					inNamespace = l.GetValue() == namespace
				case "deadletterqueue", "consumerpipeline", "retrypolicy":
					resource = l.GetValue()
				default:
					others = append(others, l.GetName()+"="+l.GetValue())
				}
			}
			if inNamespace {
				out[name+"{"+strings.Join(append([]string{resource}, others...), ",")+"}"] = m.GetGauge().GetValue()
			}
		}
	}
	return out, nil
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
