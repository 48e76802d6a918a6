// Command dev starts a local control plane (kube-apiserver and etcd, built by hack/setup-envtest.sh)
// with the retry-operator CRDs installed, writes a kubeconfig for it, and runs the manager against it
// until interrupted. It is what `make run` does on a machine with no cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

func main() {
	kubeconfigOut := flag.String("kubeconfig-out", ".dev/kubeconfig", "Where to write the kubeconfig of the local control plane.")
	manager := flag.String("manager", "bin/manager", "Manager binary to run; empty runs no manager.")
	flag.Parse()
	if err := run(*kubeconfigOut, *manager, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "dev:", err)
		os.Exit(1)
	}
}

func run(kubeconfigOut, manager string, managerArgs []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Println("==> Starting a local control plane (kube-apiserver and etcd)")
	env, err := envtestutil.Start()
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("==> Stopping the local control plane")
		_ = env.Stop()
	}()
	data, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(kubeconfigOut), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(kubeconfigOut, data, 0o600); err != nil {
		return err
	}
	abs, _ := filepath.Abs(kubeconfigOut)
	fmt.Printf("==> CRDs installed. Point kubectl at the local cluster with:\n\n    export KUBECONFIG=%s\n    kubectl apply --server-side -k config/samples\n    kubectl get retryops\n\n", abs)

	if manager == "" {
		<-ctx.Done()
		return nil
	}
	fmt.Println("==> Running the manager (Ctrl-C stops everything)")
	cmd := exec.Command(manager, managerArgs...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+abs)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", manager, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return fmt.Errorf("the manager exited: %v", err)
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return nil
	}
}
