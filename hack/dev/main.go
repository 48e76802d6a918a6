// Command dev runs the whole retry-operator loop on one machine, with nothing but Go: a local
// control plane (kube-apiserver, etcd and a controller manager built by hack/setup-envtest.sh), an
// embedded Kafka (hack/kafka, a kfake process with a data dir), the manager, and the dispatchers that
// the operator's Deployments describe, run as local processes (internal/devenv). With --demo it then
// applies the samples (config/samples) in the namespace retryops-demo, with the chat pipeline
// delivering to a demo HTTP sink that fails a share of records transiently and a share permanently,
// adds a second pipeline on its source (audit: its own group, policy, tiers and sink, fan-out),
// produces records to that source topic, binds the user jane@example.com to edit in that namespace
// (a tenant, for kubectl --as), adds a pipeline that scales on its due lag (bursts: minReplicas 0,
// fed a burst of records every few minutes), and shows `kubectl get retryops` live with each
// autoscaled pipeline's pods, due lag and wake time, and adds a pipeline on chat's source that
// delivers in batches (batched: spec.delivery.batch, a sink answering a result per record), and
// says where the generated Grafana dashboard, the demo queue's alert rules with their escalation
// tiers and the Argo CD health checks are (<dir>/operations.txt). The control plane has what
// config/default installs for a shared cluster's tenants (devenv.StackOptions.SharedCluster). Ctrl-C
// stops everything it started, and nothing else.
//
// The embedded Kafka is secured by default as a production cluster is (--kafka-security=scram): a
// TLS listener, SCRAM-SHA-512 users and the ACLs of config/strimzi. The manager is the operator's
// Kafka user; the demo's namespace (and each of --consumer-namespaces) gets its consumers' user and
// Secret, which its pipelines' pods use on the default connection.
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
	"strings"
	"sync/atomic"
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
	kafkaSecurity   string
	consumers       string
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
	flag.StringVar(&o.kafkaSecurity, "kafka-security", string(devenv.KafkaSCRAM), "How the embedded Kafka lets clients in: scram (TLS, SCRAM-SHA-512 users and the ACLs of config/strimzi, as a production cluster), tls (TLS only) or plaintext.")
	flag.StringVar(&o.consumers, "consumer-namespaces", "", "Comma-separated namespaces (created if missing) whose consumers get a Kafka user and its Secret <namespace>-consumer at start (scram only; the demo's namespace always does).")
	flag.Parse()
	if o.kafkaSecurity == "plaintext" {
		o.kafkaSecurity = string(devenv.KafkaPlaintext)
	}
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
		Images:        map[string]string{exampleConsumerImage: exampleConsumerProgram},
		ManagerArgs:   append([]string{"--status-refresh-interval=5s"}, o.managerArgs...),
		SharedCluster: true,
		KafkaSecurity: devenv.KafkaSecurity(o.kafkaSecurity),
		Log:           zap.New(zap.WriteTo(mustCreate(filepath.Join(o.dir, "logs", "runner.log")))),
	}, step)
	cleanups = append(cleanups, stack.Stop)
	if err != nil {
		return err
	}
	kubeconfig, manager := stack.Kubeconfig, stack.Manager
	consumers := splitList(o.consumers)
	if o.demo {
		consumers = append(consumers, demoNamespace)
	}
	if err := addConsumers(ctx, stack, consumers); err != nil {
		return err
	}

	kubectlPath, _ := exec.LookPath("kubectl")
	fmt.Printf("\nPoint kubectl (%s) at the local cluster with:\n\n    export KUBECONFIG=%s\n    kubectl get retryops -A\n    kubectl get deadletters -n %s\n\n", kubectlPath, kubeconfig, demoNamespace)
	if !o.demo {
		step("Ready in %s. Ctrl-C stops everything.", time.Since(started).Round(time.Second))
		select {
		case <-ctx.Done():
		case err := <-manager.Done:
			return fmt.Errorf("the manager exited (see %s): %w", manager.LogPath, err)
		}
		return nil
	}

	step("Serving the demo sinks on http://%s: /tasks for chat (5%% of records fail for good, 20%% fail twice first), "+
		"/audit for audit (4%% fail for good, 20%% fail once, 2%% three times), /bursts for bursts (%s a record, 10%% fail once), "+
		"/batched for batched (batches with a result per record: 4%% fail for good, 20%% fail once)", o.sinkAddr, burstsCost)
	sink, audit, bursts, batched := devenv.DefaultDemoSink(), auditSink(), burstsSink(), &batchSink{}
	mux := http.NewServeMux()
	mux.Handle("/tasks", sink)
	mux.Handle("/audit", audit)
	mux.Handle("/bursts", bursts)
	mux.Handle("/batched", batched)
	srv := &http.Server{Addr: o.sinkAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "dev: demo sink:", err)
		}
	}()
	cleanups = append(cleanups, func() { _ = srv.Close() })

	step("Applying the samples (config/samples) in namespace %s: pipeline chat delivers to the demo sink; "+
		"pipeline audit, its own group, policy and tiers, reads chat's source too (fan-out) and shares its queue; "+
		"documents (library mode) runs examples/consumer as bin/%s; bursts scales on its due lag, from 0 to 4 pods; "+
		"batched reads chat's source too and delivers in batches of up to 100", demoNamespace, exampleConsumerProgram)
	demoDir, err := writeDemo(o.dir, o.sinkAddr)
	if err != nil {
		return err
	}
	if out, err := kubectl(kubeconfig, []byte(demoNamespaceManifest+demoTenantManifest), "apply", "--server-side", "-f", "-"); err != nil {
		return fmt.Errorf("creating namespace %s: %w\n%s", demoNamespace, err, out)
	}
	if out, err := kubectl(kubeconfig, nil, "apply", "--server-side", "-k", demoDir); err != nil {
		return fmt.Errorf("applying the samples: %w\n%s", err, out)
	}
	operations := "operations: the dashboard, the alert tiers and the Argo CD checks: "
	if note, path, err := demoOperations(o.dir, demoDir); err != nil {
		operations += err.Error()
	} else {
		fmt.Print("\n" + note + "\n")
		operations += "cat " + path
	}

	step("Producing %d records a second to %s, the source topic of chat and audit%s", o.rate, demoTopic, producerIdentity(stack))
	prodCtx, cancelProd := context.WithCancel(ctx)
	cleanups = append(cleanups, cancelProd)
	go func() {
		for n := 0; prodCtx.Err() == nil; n += o.rate * 10 {
			if err := devenv.Produce(prodCtx, stack.KafkaOptions(), demoTopic, n, n+o.rate*10, o.rate); err != nil && prodCtx.Err() == nil {
				fmt.Fprintln(os.Stderr, "dev: producer:", err)
				time.Sleep(time.Second)
			}
		}
	}()

	step("Producing %d documents to %s every %s for documents' consumer: one embedded at once, one retried twice, "+
		"one malformed (dead-lettered at once), one past its 5 attempts (dead-lettered, max_retries_exceeded)", len(demoDocuments(0)), documentsTopic, documentsEvery)
	var documentRounds atomic.Int32
	go produceDocuments(prodCtx, stack, &documentRounds)

	step("Producing %d records to %s every %s: bursts scales up on its due lag, back down, to 0 pods, and wakes before its retries are due", burstsSize, burstsTopic, burstsEvery)
	go produceBursts(prodCtx, stack)

	var refusal atomic.Pointer[string]
	go demoActions(prodCtx, kubeconfig, &refusal)

	step("Live view (Ctrl-C stops everything); set up in %s", time.Since(started).Round(time.Second))
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		out, _ := kubectl(kubeconfig, nil, "get", "retryops", "-n", demoNamespace)
		delays := sink.FirstRetryDelays()
		tenant := "a tenant's view: kubectl get retryops,deadletters -n " + demoNamespace + " --as " + demoTenant + " (bound to edit)"
		if r := refusal.Load(); r != nil {
			tenant += "\n" + *r
		}
		auditDelays := audit.FirstRetryDelays()
		fmt.Printf("\033[H\033[2J%s   demo sinks: chat %d requests, %d records delivered; audit %d requests, %d records delivered; bursts %d requests, %d records delivered   (KUBECONFIG=%s)\n"+
			"%s\n%s\nfirst retries: chat %d, delays %s; audit %d, delays %s (each record retried at its own jittered due time)\n%s\n%s\n\n%s\n%s",
			time.Now().Format(time.TimeOnly), sink.Requests(), sink.Succeeded(), audit.Requests(), audit.Succeeded(), bursts.Requests(), bursts.Succeeded(), kubeconfig,
			batched.line(), documentsLine(documentRounds.Load()), len(delays), devenv.Deciles(delays), len(auditDelays), devenv.Deciles(auditDelays), tenant, operations, out, autoscalingView(kubeconfig, demoNamespace, time.Now()))
		select {
		case <-ctx.Done():
			fmt.Println()
			return nil
		case err := <-manager.Done:
			return fmt.Errorf("the manager exited (see %s): %w", manager.LogPath, err)
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

// addConsumers gives each namespace's consumers their Kafka user and its Secret (the secured stack
// only), creating the namespace first if needed.
func addConsumers(ctx context.Context, stack *devenv.Stack, namespaces []string) error {
	if stack.OperatorKafkaUser() == "" {
		return nil
	}
	for _, ns := range namespaces {
		if out, err := kubectl(stack.Kubeconfig, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: "+ns+"}\n"), "apply", "--server-side", "-f", "-"); err != nil {
			return fmt.Errorf("creating namespace %s: %w\n%s", ns, err, out)
		}
		user, err := stack.AddConsumer(ctx, ns)
		if err != nil {
			return err
		}
		step("The pods of namespace %s are Kafka user %s (Secret %s/%s, in the shape a Strimzi KafkaUser's has; ACLs of config/strimzi/kafkauser-consumer.yaml)",
			ns, user, ns, devenv.ConsumerSecretName(ns))
	}
	return nil
}

// producerIdentity says, on the secured stack, which Kafka user the demo's producer is.
func producerIdentity(stack *devenv.Stack) string {
	if stack.OperatorKafkaUser() == "" {
		return ""
	}
	return " (as Kafka user " + devenv.KafkaSuperuser + ", the demo's own, neither the manager's nor the pods')"
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
