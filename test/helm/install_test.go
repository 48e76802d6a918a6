package helm

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/devenv"
	"github.com/retryops/retry-operator/internal/envtestutil"
)

const (
	demoNamespace = "helm-demo"
	records       = 50
)

// The CRDs the chart installs.
var crdNames = []string{"retrypolicies.retry.retryops.dev", "deadletterqueues.retry.retryops.dev",
	"consumerpipelines.retry.retryops.dev", "deadletteractions.retry.retryops.dev"}

// TestHelmInstallRunsTheChartsManager installs the chart with each helm major on a local control plane (with
// the controller manager, so that the chart's Deployment gets a ReplicaSet and a Pod) and runs that
// Pod as a local process, as `make dev` runs the dispatchers: the manager binary with the Pod's
// arguments, environment and ServiceAccount token, so with exactly the chart's RBAC. The manager
// reconciles a pipeline to Ready and its dispatchers deliver records from an in-process kfake to an
// httptest sink. Then `helm upgrade` with a log level rolls the manager out to a process with
// --zap-log-level=debug, which reconciles a change of the pipeline, and `helm uninstall` removes the
// release but keeps the CRDs and the resources.
func TestHelmInstallRunsTheChartsManager(t *testing.T) {
	bin := buildBinaries(t, filepath.Join(t.TempDir(), "bin"))
	eachHelm(t, func(t *testing.T, helm string) { installUpgradeUninstall(t, helm, bin) })
}

func installUpgradeUninstall(t *testing.T, helm string, bin map[string]string) {
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()

	broker, err := kfake.NewCluster(kfake.NumBrokers(1))
	g.Expect(err).NotTo(HaveOccurred())
	defer broker.Close()
	bootstrap := broker.ListenAddrs()[0]

	logFile, err := os.Create(filepath.Join(dir, "runner.log"))
	g.Expect(err).NotTo(HaveOccurred())
	log := zap.New(zap.WriteTo(logFile))
	// controller-runtime's own log (envtest, clients) goes with the runners'.
	ctrllog.SetLogger(log)

	// The aggregation layer as `make dev` has it: the manager serves the deadletters API.
	env, err := envtestutil.StartAggregated()
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = env.Stop() }()
	kcm, err := env.StartControllerManager()
	g.Expect(err).NotTo(HaveOccurred())
	defer kcm.Stop()
	// envtest installed the CRDs from config/crd/bases: the chart installs them here.
	out, err := env.Kubectl(nil, append([]string{"delete", "crd", "--wait"}, crdNames...)...)
	g.Expect(err).NotTo(HaveOccurred(), out)

	managers := &devenv.Runner{
		Client: env.Client, Config: env.Config, Dir: filepath.Join(dir, "manager-pods"), Log: log.WithName("managers"),
		Images:     map[string]string{"ghcr.io/retryops/retry-operator": bin["manager"]},
		Selector:   labels.SelectorFromSet(labels.Set{"control-plane": "controller-manager", "app.kubernetes.io/instance": release}),
		HealthFlag: "health-probe-bind-address", ListenFlags: []string{"metrics-bind-address", "deadletters-api-bind-address"},
		Interval: 200 * time.Millisecond,
	}
	dispatchers := &devenv.Runner{
		Client: env.Client, Config: env.Config, Dir: filepath.Join(dir, "pods"), Log: log.WithName("dispatchers"),
		Images: map[string]string{"ghcr.io/retryops/retry-dispatcher": bin["dispatcher"]}, Interval: 200 * time.Millisecond,
	}
	for _, r := range []*devenv.Runner{managers, dispatchers} {
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Start(ctx) }()
		defer func() { cancel(); <-done }()
	}
	defer func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
	}()

	helmArgs := []string{"--kubeconfig", env.Kubeconfig, "--namespace", namespace}
	installed := run(t, nil, helm, append([]string{"install", release, chartDir, "--values", filepath.Join("testdata", "install.yaml"),
		"--set", "kafka.bootstrapServers=" + bootstrap}, helmArgs...)...)
	version := strings.TrimSpace(string(run(t, nil, helm, "version", "--short")))
	t.Logf("helm install %s %s (helm %s): %s", release, chartDir, version, firstLines(installed, 4))

	pod := waitForManager(t, env.Client, managers, "")
	t.Logf("the manager runs from the chart's Deployment: pod %s, %s %s", pod, bin["manager"], strings.Join(managers.Args(pod), " "))

	sink := &devenv.DemoSink{Permanent: func(int) bool { return false }, Transient: func(int) int { return 0 }}
	srv := httptest.NewServer(sink)
	defer srv.Close()
	out, err = env.Kubectl([]byte(demoManifests(srv.URL+"/tasks")), "apply", "--server-side", "-f", "-")
	g.Expect(err).NotTo(HaveOccurred(), out)
	pipeline := &retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "orders"}}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pipeline), pipeline)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(pipeline.Status.Conditions, retryv1alpha1.ConditionReady)).To(BeTrue(), "conditions: %v", pipeline.Status.Conditions)
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed(), "the pipeline never became Ready")
	t.Logf("ConsumerPipeline %s/%s Ready, reconciled by the chart's manager", demoNamespace, pipeline.Name)

	g.Expect(devenv.Produce(ctx, []kgo.Opt{kgo.SeedBrokers(bootstrap)}, "orders", 0, records, 0)).To(Succeed())
	g.Eventually(sink.Succeeded, 3*time.Minute, 250*time.Millisecond).Should(Equal(records))
	t.Logf("%d records delivered to the sink by the pipeline's dispatchers (running: %v)", records, dispatchers.Running())

	upgraded := run(t, nil, helm, append([]string{"upgrade", release, chartDir, "--reuse-values", "--set", "logLevel=debug"}, helmArgs...)...)
	t.Logf("helm upgrade %s --set logLevel=debug: %s", release, firstLines(upgraded, 4))
	newPod := waitForManager(t, env.Client, managers, "--zap-log-level=debug")
	g.Expect(newPod).NotTo(Equal(pod), "the upgrade rolled the manager out")
	t.Logf("the upgraded Deployment's new pod %s runs %s", newPod, strings.Join(managers.Args(newPod), " "))
	out, err = env.Kubectl(nil, "-n", demoNamespace, "patch", "consumerpipeline", pipeline.Name, "--type=merge", "-p", `{"spec":{"replicas":2}}`)
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func(g Gomega) {
		g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pipeline), pipeline)).To(Succeed())
		ready := meta.FindStatusCondition(pipeline.Status.Conditions, retryv1alpha1.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(ready.ObservedGeneration).To(Equal(pipeline.Generation))
		g.Expect(dispatchers.Running()).To(HaveLen(2))
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed(), "the upgraded manager did not reconcile the pipeline's new replicas")
	t.Logf("the upgraded manager reconciled ConsumerPipeline %s/%s to 2 replicas (generation %d): %v",
		demoNamespace, pipeline.Name, pipeline.Generation, dispatchers.Running())

	uninstalled := run(t, nil, helm, append([]string{"uninstall", release}, helmArgs...)...)
	t.Logf("helm uninstall %s: %s", release, firstLines(uninstalled, 8))
	g.Eventually(func() bool {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: release + "-controller-manager"}, &appsv1.Deployment{})
		return apierrors.IsNotFound(err)
	}, time.Minute, 250*time.Millisecond).Should(BeTrue(), "the manager's Deployment was not removed")
	g.Eventually(managers.Running, time.Minute, 250*time.Millisecond).Should(BeEmpty(), "the manager still runs")
	out, err = env.Kubectl(nil, append([]string{"get", "crd", "-o", "name"}, crdNames...)...)
	g.Expect(err).NotTo(HaveOccurred(), "the CRDs were not kept: %s", out)
	g.Expect(env.Client.Get(ctx, client.ObjectKeyFromObject(pipeline), pipeline)).To(Succeed(), "the pipeline was not kept")
	list := run(t, nil, helm, append([]string{"list", "--short"}, helmArgs...)...)
	g.Expect(strings.TrimSpace(string(list))).To(BeEmpty(), "a release is left")
	t.Logf("after helm uninstall: the release and its manager are gone; kept: %d CRDs and ConsumerPipeline %s/%s",
		len(crdNames), demoNamespace, pipeline.Name)
}

// waitForManager waits until the chart's Deployment is rolled out with one available replica whose
// process runs with arg among its arguments (any, when arg is empty), and returns its Pod's key.
func waitForManager(t *testing.T, c client.Client, managers *devenv.Runner, arg string) string {
	t.Helper()
	var pod string
	NewWithT(t).Eventually(func(g Gomega) {
		dep := &appsv1.Deployment{}
		g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: release + "-controller-manager"}, dep)).To(Succeed())
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		g.Expect(dep.Status.UpdatedReplicas).To(Equal(int32(1)))
		g.Expect(dep.Status.AvailableReplicas).To(Equal(int32(1)))
		g.Expect(dep.Status.Replicas).To(Equal(int32(1)), "an old replica is left")
		running := managers.Running()
		g.Expect(running).To(HaveLen(1))
		pod = running[0]
		if arg != "" {
			g.Expect(managers.Args(pod)).To(ContainElement(arg))
		}
	}, 3*time.Minute, 250*time.Millisecond).Should(Succeed(), "the chart's manager never ran")
	return pod
}

// buildBinaries builds the manager and the dispatcher into dir.
func buildBinaries(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, pkg := range map[string]string{"manager": "./cmd/manager", "dispatcher": "./cmd/dispatcher"} {
		out[name] = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", out[name], pkg)
		cmd.Dir = envtestutil.RepoRoot()
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	return out
}

func demoManifests(sinkURL string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: ` + demoNamespace + `}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: orders, namespace: ` + demoNamespace + `}
spec:
  maxAttempts: 3
  backoff: {initialDelay: 1s, multiplier: "2", maxDelay: 10s}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["500-599"]}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: orders-dlq, namespace: ` + demoNamespace + `}
spec:
  topic: {name: orders.dlq, partitions: 1}
  deletionPolicy: Retain
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: orders, namespace: ` + demoNamespace + `}
spec:
  source: {topic: orders, create: {partitions: 2}}
  retryPolicyRef: {name: orders}
  deadLetterQueueRef: {name: orders-dlq}
  sink: {uri: "` + sinkURL + `"}
  replicas: 1
`
}

// firstLines is the first n lines of out, on one line.
func firstLines(out []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(lines[:min(n, len(lines))], " | ")
}

// dumpLogs shows the tail of the runners' log and of every Pod's process.
func dumpLogs(t *testing.T, dir string) {
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || (info.Name() != "log" && info.Name() != "runner.log") {
			return nil //nolint:nilerr // best effort: what cannot be read is left out
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		t.Logf("---- %s (%d bytes; tail)\n%s", rel, len(b), b[max(0, len(b)-6000):])
		return nil
	})
}
