package envtestutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// ControllerManager is a controller-manager process (hack/controller-manager) running against an Env, so that owner
// reference garbage collection, Deployment rollouts (ReplicaSets, Pods), ClusterRole aggregation and
// HorizontalPodAutoscalers work as in a cluster.
type ControllerManager struct {
	cmd  *exec.Cmd
	done chan error
	// LogPath is the file receiving the process's output.
	LogPath string
}

// HPASyncPeriod is the horizontal pod autoscaler's sync period on the local stack: short, so that a
// pipeline scales within seconds of its due lag changing (kube-controller-manager's default is 15s).
const HPASyncPeriod = 2 * time.Second

// StartControllerManager starts controller-manager (hack/controller-manager, built by
// hack/setup-envtest.sh --with-controller-manager): Kubernetes' garbage collector, Deployment,
// ReplicaSet, namespace, clusterrole-aggregation and horizontal pod autoscaler controllers, the
// latter evaluating every HPA each HPASyncPeriod. Pods are not scheduled (there is no kubelet); see
// internal/devenv for the local pod runner.
func (e *Env) StartControllerManager() (*ControllerManager, error) {
	bin := filepath.Join(e.AssetsDir, "controller-manager")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("controller-manager missing in %s (run hack/setup-envtest.sh --with-controller-manager): %w", e.AssetsDir, err)
	}
	logPath := filepath.Join(e.dir, "controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+e.Kubeconfig,
		"--concurrent-gc-syncs=5",
		"--horizontal-pod-autoscaler-sync-period="+HPASyncPeriod.String(),
		"--v=1",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting controller-manager: %w", err)
	}
	cm := &ControllerManager{cmd: cmd, done: make(chan error, 1), LogPath: logPath}
	go func() { cm.done <- cmd.Wait(); _ = logFile.Close() }()
	return cm, nil
}

// Stop stops the process, waiting up to 10s before killing it.
func (cm *ControllerManager) Stop() {
	_ = cm.cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-cm.done:
	case <-ctx.Done():
		_ = cm.cmd.Process.Kill()
		<-cm.done
	}
}
