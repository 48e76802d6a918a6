// Command dev runs the whole retry-operator loop on one machine, with nothing but Go: a local
// control plane (kube-apiserver, etcd and kube-controller-manager built by hack/setup-envtest.sh), an
// embedded Kafka (hack/kafka, a kfake process with a data dir), the manager, and the dispatchers that
// the operator's Deployments describe, run as local processes (internal/devenv). With --demo it then
// applies a demo pipeline, serves a demo HTTP sink that fails a share of records transiently and a
// share permanently, produces demo records, and shows `kubectl get retryops` live. Ctrl-C stops
// everything it started, and nothing else.
//
// `make dev` runs it with --demo; `make run` without.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryops/retry-operator/internal/devenv"
)

type options struct {
	dir             string
	kafkaPort       int
	sinkAddr        string
	demo            bool
	rate            int
	dispatcherImage string
	managerArgs     []string
}

func main() {
	o := options{}
	flag.StringVar(&o.dir, "dir", ".dev", "Directory for the kubeconfig, Kafka's data and the processes' logs.")
	flag.IntVar(&o.kafkaPort, "kafka-port", 39092, "Port of the embedded Kafka (127.0.0.1).")
	flag.StringVar(&o.sinkAddr, "sink-address", "127.0.0.1:38080", "Address of the demo HTTP sink.")
	flag.BoolVar(&o.demo, "demo", false, "Apply the demo pipeline, run the demo sink and producer, and show the live view.")
	flag.IntVar(&o.rate, "rate", 20, "Demo records produced per second.")
	flag.StringVar(&o.dispatcherImage, "dispatcher-image", "ghcr.io/retryops/retry-dispatcher:dev", "Dispatcher image the operator renders; run locally as bin/dispatcher.")
	flag.Parse()
	o.managerArgs = flag.Args()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) {
	fmt.Printf("==> "+format+"\n", args...)
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	if err := os.MkdirAll(filepath.Join(o.dir, "logs"), 0o755); err != nil {
		return err
	}
	var cleanups []func()
	defer func() {
		step("Stopping everything that was started")
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		step("Stopped")
	}()

	stack, err := devenv.StartStack(ctx, devenv.StackOptions{
		Dir: o.dir, Bin: "bin", KafkaPort: o.kafkaPort, DispatcherImage: o.dispatcherImage,
		ManagerArgs: append([]string{"--status-refresh-interval=5s"}, o.managerArgs...),
		Log:         zap.New(zap.WriteTo(mustCreate(filepath.Join(o.dir, "logs", "runner.log")))),
	}, step)
	cleanups = append(cleanups, stack.Stop)
	if err != nil {
		return err
	}
	kubeconfig, manager := stack.Kubeconfig, stack.Manager

	fmt.Printf("\nPoint kubectl at the local cluster with:\n\n    export KUBECONFIG=%s\n    kubectl get retryops -A\n\n", kubeconfig)
	if !o.demo {
		step("Ready in %s. Ctrl-C stops everything.", time.Since(started).Round(time.Second))
		select {
		case <-ctx.Done():
		case err := <-manager.Done:
			return fmt.Errorf("the manager exited (see %s): %v", manager.LogPath, err)
		}
		return nil
	}

	step("Serving the demo sink on http://%s (5%% of records fail for good, 20%% fail twice first)", o.sinkAddr)
	sink := devenv.DefaultDemoSink()
	srv := &http.Server{Addr: o.sinkAddr, Handler: sink, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "dev: demo sink:", err)
		}
	}()
	cleanups = append(cleanups, func() { _ = srv.Close() })

	step("Applying the demo resources")
	if out, err := kubectl(kubeconfig, []byte(demoManifests(o.sinkAddr)), "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("applying the demo: %v\n%s", err, out)
	}

	step("Producing %d demo records a second to topic demo-tasks", o.rate)
	prodCtx, cancelProd := context.WithCancel(ctx)
	cleanups = append(cleanups, cancelProd)
	go func() {
		for n := 0; prodCtx.Err() == nil; n += o.rate * 10 {
			if err := devenv.Produce(prodCtx, []string{stack.Bootstrap}, "demo-tasks", n, n+o.rate*10, o.rate); err != nil && prodCtx.Err() == nil {
				fmt.Fprintln(os.Stderr, "dev: producer:", err)
				time.Sleep(time.Second)
			}
		}
	}()

	step("Live view (Ctrl-C stops everything); set up in %s", time.Since(started).Round(time.Second))
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		out, _ := kubectl(kubeconfig, nil, "get", "retryops", "-n", "retryops-demo")
		fmt.Printf("\033[H\033[2J%s   demo sink: %d requests, %d records delivered   (KUBECONFIG=%s)\n\n%s",
			time.Now().Format(time.TimeOnly), sink.Requests(), sink.Succeeded(), kubeconfig, out)
		select {
		case <-ctx.Done():
			fmt.Println()
			return nil
		case err := <-manager.Done:
			return fmt.Errorf("the manager exited (see %s): %v", manager.LogPath, err)
		case <-tick.C:
		}
	}
}

func mustCreate(path string) *os.File {
	f, err := os.Create(path)
	if err != nil {
		return os.Stderr
	}
	return f
}

func kubectl(kubeconfig string, stdin []byte, args ...string) (string, error) {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// demoManifests is the demo: the delegation policy's schedule (1s, 2s, 4s), a dead letter queue and a
// pipeline delivering to the local demo sink.
func demoManifests(sinkAddr string) string {
	return `apiVersion: v1
kind: Namespace
metadata: {name: retryops-demo}
---
apiVersion: retry.retryops.dev/v1alpha1
kind: RetryPolicy
metadata: {name: demo, namespace: retryops-demo}
spec:
  maxAttempts: 4
  backoff: {initialDelay: 1s, multiplier: "2", maxDelay: 10s, jitter: {mode: Proportional, minPercent: 80, maxPercent: 120}}
  classification:
    defaultAction: DeadLetter
    rules:
    - {name: transient-http, action: Retry, httpStatuses: ["408", "429", "500-599"]}
    - {name: transient-errors, action: Retry, errorTypes: [TimeoutError, ConnectionError]}
  attemptTimeout: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: DeadLetterQueue
metadata: {name: demo-dlq, namespace: retryops-demo}
spec:
  topic: {name: demo-tasks.dlq, partitions: 3}
  retention: {maxAge: 168h, maxMessages: 10000}
  statusRefreshInterval: 5s
---
apiVersion: retry.retryops.dev/v1alpha1
kind: ConsumerPipeline
metadata: {name: demo, namespace: retryops-demo}
spec:
  source: {topic: demo-tasks, create: {partitions: 3}}
  retryPolicyRef: {name: demo}
  deadLetterQueueRef: {name: demo-dlq}
  sink: {uri: "http://` + sinkAddr + `/tasks"}
  replicas: 2
`
}
