package devenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/retryops/retry-operator/internal/envtestutil"
)

// StackOptions configure a Stack.
type StackOptions struct {
	// Dir receives the kubeconfig, Kafka's data and every process's log.
	Dir string
	// Bin holds the manager, dispatcher and kafka binaries (go build -o <Bin>/<name>).
	Bin string
	// KafkaPort is the embedded Kafka's port on 127.0.0.1; 0 picks a free one.
	KafkaPort int
	// DispatcherImage is the image the operator renders; the runner runs Bin/dispatcher for it.
	DispatcherImage string
	// Images are the other images the runner runs: an image, or its repository without the tag, to
	// the name of a program in Bin (a library-mode consumer built from examples/).
	Images map[string]string
	// ManagerArgs are extra flags for the manager.
	ManagerArgs []string
	// SharedCluster installs what config/default installs for a cluster's tenants: the admission
	// policies (config/admission) and the ClusterRoles aggregated into edit, admin and view
	// (InstallSharedCluster), so that a user bound to edit sees what a tenant would.
	SharedCluster bool
	// KafkaSecurity is how the embedded Kafka lets clients in: plaintext (the default), TLS, or TLS
	// with SCRAM users and the ACLs of config/strimzi (KafkaSCRAM).
	KafkaSecurity KafkaSecurity
	// Log receives the runner's log.
	Log logr.Logger
}

// Stack is the whole loop on one machine: an embedded Kafka process, a control plane with
// controller manager, the manager process, and the runner that runs the operator's Deployment
// pods as local processes. `make dev` and the end-to-end test both use it.
type Stack struct {
	// Env is the control plane.
	Env *envtestutil.Env
	// Kubeconfig is the path of a kubeconfig for the control plane (inside Dir).
	Kubeconfig string
	// Bootstrap is the embedded Kafka's address.
	Bootstrap string
	// Runner runs the dispatchers.
	Runner *Runner
	// Manager is the manager process.
	Manager *Process
	// MetricsURL is the manager's Prometheus endpoint (http://127.0.0.1:<port>/metrics).
	MetricsURL string

	cleanups     []func()
	kafkaAuth    *kafkaAuth
	startManager func(name string) (*Process, error)
	restarts     int
}

// RestartManager stops the manager process (SIGTERM, as a rolling update would) and starts it
// again with the same flags; the new one logs to logs/manager-<n>.log.
func (s *Stack) RestartManager() error {
	s.Manager.Stop()
	s.restarts++
	p, err := s.startManager(fmt.Sprintf("manager-%d", s.restarts+1))
	if err != nil {
		return err
	}
	s.Manager = p
	return nil
}

// Process is a child process whose output goes to a log file.
type Process struct {
	// Name names the process and its log file.
	Name string
	// LogPath is the file receiving its output.
	LogPath string
	// Done receives the process's exit.
	Done  chan error
	cmd   *exec.Cmd
	stop  sync.Once
	clock clock.Clock
}

// StartProcess runs bin with args, its output in dir/name.log. The process dies with its parent.
func StartProcess(dir, name string, env []string, bin string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, Done: make(chan error, 1), cmd: cmd, clock: clock.RealClock{}}
	go func() { p.Done <- cmd.Wait(); _ = f.Close() }()
	return p, nil
}

// Stop sends SIGTERM and waits up to 15s before killing the process. Stopping it again does
// nothing.
func (p *Process) Stop() {
	p.stop.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.Done:
		case <-p.clock.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.Done
		}
	})
}

// WaitForPort waits until something accepts connections on addr.
func WaitForPort(ctx context.Context, addr string) error {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet: poll again
		}
		return true, c.Close()
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("nothing listens on %s", addr)
	}
	return err
}

// StartStack starts the stack; progress lines go to progress (may be nil). Stop it with Stop, also
// when StartStack fails.
func StartStack(ctx context.Context, o StackOptions, progress func(format string, args ...any)) (*Stack, error) {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	s := &Stack{}
	logs := filepath.Join(o.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return s, err
	}
	bin := func(name string) string { p, _ := filepath.Abs(filepath.Join(o.Bin, name)); return p }
	if o.KafkaPort == 0 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return s, err
		}
		o.KafkaPort = l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
	}

	auth, kafkaArgs, securedManagerArgs, err := prepareKafkaAuth(o.KafkaSecurity, filepath.Join(o.Dir, "kafka-auth"), clock.RealClock{})
	if err != nil {
		return s, err
	}
	s.kafkaAuth = auth
	progress("Starting the embedded Kafka on 127.0.0.1:%d (%s; data in %s)", o.KafkaPort, auth.describe(), filepath.Join(o.Dir, "kafka"))
	s.Bootstrap = fmt.Sprintf("127.0.0.1:%d", o.KafkaPort)
	kafka, err := StartProcess(logs, "kafka", nil, bin("kafka"),
		append([]string{"--port", fmt.Sprint(o.KafkaPort), "--data-dir", filepath.Join(o.Dir, "kafka")}, kafkaArgs...)...)
	if err != nil {
		return s, err
	}
	s.cleanups = append(s.cleanups, kafka.Stop)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitForPort(waitCtx, s.Bootstrap); err != nil {
		return s, fmt.Errorf("the embedded Kafka did not start (see %s): %w", kafka.LogPath, err)
	}
	if err := s.grantOperator(waitCtx); err != nil {
		return s, fmt.Errorf("the embedded Kafka (see %s): %w", kafka.LogPath, err)
	}

	progress("Starting the local control plane (kube-apiserver, etcd, controller-manager)")
	// controller-runtime's own log (envtest, clients) goes with the stack's.
	ctrllog.SetLogger(o.Log)
	// With the aggregation layer: the manager serves the deadletters API (RegisterDeadLettersAPI).
	env, err := envtestutil.StartAggregated(filepath.Join(envtestutil.RepoRoot(), "config", "crd", "external"))
	if err != nil {
		return s, err
	}
	s.Env = env
	s.cleanups = append(s.cleanups, func() { _ = env.Stop() })
	kcm, err := env.StartControllerManager()
	if err != nil {
		return s, err
	}
	s.cleanups = append(s.cleanups, kcm.Stop)
	if o.SharedCluster {
		progress("Installing the admission policies (config/admission) and the ClusterRoles aggregated into edit, admin and view (config/rbac)")
		if err := InstallSharedCluster(ctx, env); err != nil {
			return s, err
		}
	}
	if s.Kubeconfig, err = filepath.Abs(filepath.Join(o.Dir, "kubeconfig")); err != nil {
		return s, err
	}
	data, err := os.ReadFile(env.Kubeconfig)
	if err != nil {
		return s, err
	}
	if err := os.WriteFile(s.Kubeconfig, data, 0o600); err != nil {
		return s, err
	}

	metrics := "127.0.0.1:" + freePort()
	s.MetricsURL = "http://" + metrics + "/metrics"
	progress("Running the manager (log: %s, metrics: %s)%s", filepath.Join(logs, "manager.log"), s.MetricsURL, auth.identities())
	dlqAPIPort := freePort()
	port, err := strconv.ParseInt(dlqAPIPort, 10, 32)
	if err != nil {
		return s, fmt.Errorf("no free port for the deadletters API: %w", err)
	}
	if err := RegisterDeadLettersAPI(ctx, env.Client, int32(port)); err != nil {
		return s, err
	}
	// The same manager serves the due lag to the controller-manager's HPA controller.
	if err := RegisterExternalMetricsAPI(ctx, env.Client, int32(port)); err != nil {
		return s, err
	}
	args := append([]string{
		"--deadletters-api-bind-address=127.0.0.1:" + dlqAPIPort,
		"--kafka-bootstrap-servers=" + s.Bootstrap,
		"--dispatcher-image=" + o.DispatcherImage,
		"--metrics-bind-address=" + metrics,
		"--health-probe-bind-address=127.0.0.1:0",
	}, append(securedManagerArgs, o.ManagerArgs...)...)
	s.startManager = func(name string) (*Process, error) {
		return StartProcess(logs, name, []string{"KUBECONFIG=" + s.Kubeconfig}, bin("manager"), args...)
	}
	if s.Manager, err = s.startManager("manager"); err != nil {
		return s, err
	}
	s.cleanups = append(s.cleanups, func() { s.Manager.Stop() })

	progress("Running the dispatchers of the operator's Deployments as local processes")
	runCtx, cancelRunner := context.WithCancel(context.Background())
	s.Runner = &Runner{
		Client: env.Client, Config: env.Config, Dir: filepath.Join(o.Dir, "pods"), Log: o.Log,
		Images: map[string]string{o.DispatcherImage: bin("dispatcher"), strings.Split(o.DispatcherImage, ":")[0]: bin("dispatcher")},
	}
	for image, program := range o.Images {
		s.Runner.Images[image] = bin(program)
	}
	runnerDone := make(chan struct{})
	go func() { defer close(runnerDone); _ = s.Runner.Start(runCtx) }()
	s.cleanups = append(s.cleanups, func() { cancelRunner(); <-runnerDone })
	return s, nil
}

// Kubectl runs the real kubectl against the stack's control plane.
func (s *Stack) Kubectl(stdin []byte, args ...string) (string, error) {
	return s.Env.Kubectl(stdin, args...)
}

// Stop stops everything the stack started, in reverse order.
func (s *Stack) Stop() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}
