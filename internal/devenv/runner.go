// Package devenv runs, on the local machine, what a cluster's kubelet would: for every Pod of a
// Deployment the operator manages, it starts the container's program as a local process with the
// same environment and the same mounted files (ConfigMaps and Secrets written to a directory), and
// reports the Pod Running and Ready once the process answers its readiness probe. With
// the controller manager (hack/controller-manager) making ReplicaSets and Pods, this gives `make dev` and the end-to-end test
// real Deployments, rollouts and garbage collection without a container runtime.
//
// Stack (StartStack) is that whole loop: the embedded Kafka process (hack/kafka), a control plane
// with the aggregation layer, the manager process and this runner. StackOptions.Images maps more
// images to local programs (`make dev` runs examples/consumer for the library-mode sample). The
// runner mounts volumes with their items and, as a kubelet does, leaves a Pod Pending while a
// Secret it mounts is missing. The embedded Kafka may be secured as production Kafka is: a
// throwaway CA, SCRAM users and config/strimzi's ACLs enforced (KafkaSecurity), with AddConsumer
// for a namespace's consumer user and Secret.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ManagedByLabel selects the Pods the runner runs: those of Deployments the operator manages.
const ManagedByLabel = "app.kubernetes.io/managed-by=retry-operator"

// Runner runs the operator's Pods as local processes.
type Runner struct {
	// Client reaches the API server (uncached).
	Client client.Client
	// Config is the API server's address and CA. When set, a Pod that mounts a ServiceAccount token
	// (automountServiceAccountToken not false) gets, as a kubelet would give it a token, a
	// kubeconfig holding a token of its ServiceAccount, in KUBECONFIG: the process has exactly the
	// rights of the Pod's ServiceAccount.
	Config *rest.Config
	// Dir receives each Pod's files and logs.
	Dir string
	// Images maps a container image, or its repository without the tag, to a local binary. A Pod
	// whose first container's image is not listed stays Pending (it is the user's own image).
	Images map[string]string
	// Log receives the runner's events.
	Log logr.Logger
	// Interval is how often Pods are listed. Defaults to 500ms.
	Interval time.Duration
	// RestartBackoff is the first wait before a process that exited is started again, as a kubelet
	// restarts a container of a Deployment's Pod: doubled after each exit, at most MaxRestartBackoff,
	// and back to the first wait once a process has run for MaxRestartBackoff. Defaults to 10s, a
	// kubelet's.
	RestartBackoff time.Duration
	// Clock paces the runner and stamps its processes. Defaults to the real clock.
	Clock clock.WithTicker
	// Selector selects the Pods the runner runs. Defaults to ManagedByLabel.
	Selector labels.Selector
	// HealthFlag, when set, is for programs that take their listen addresses as flags rather than
	// from a config file (the manager): this flag (a name without dashes) and each of ListenFlags is
	// set to a free port on 127.0.0.1, so that processes of several Pods or tests never collide, and
	// the readiness probe the runner reports is HealthFlag's.
	HealthFlag string
	// ListenFlags are the other listen-address flags of HealthFlag's programs.
	ListenFlags []string

	mu    sync.Mutex
	procs map[string]*proc // by namespace/name
}

// MaxRestartBackoff caps the wait before a process that keeps exiting is started again (a kubelet's
// CrashLoopBackOff cap).
const MaxRestartBackoff = 5 * time.Minute

type proc struct {
	uid        string
	cmd        *exec.Cmd
	done       chan struct{}
	healthURL  string
	baseURL    string
	args       []string
	exitErr    error
	unrunnable bool
	// setup is why the container could not be created (a volume that cannot be mounted: reason
	// ContainerCreating; an env var that cannot be resolved: CreateContainerConfigError). As a kubelet
	// does, the runner tries again while the Pod exists, and it stays Pending meanwhile.
	setup *corev1.ContainerStateWaiting

	// started is when the process started; exited, its termination once it exited (with exitErr).
	started time.Time
	exited  *corev1.ContainerStateTerminated
	// restarts is how many times the Pod's process was started again; last is the termination of
	// the previous process, backoff the wait before this one is started again once it exits.
	restarts int32
	last     *corev1.ContainerStateTerminated
	backoff  time.Duration
}

// Start runs the runner until ctx ends, then stops every process it started.
func (r *Runner) Start(ctx context.Context) error {
	if r.Interval == 0 {
		r.Interval = 500 * time.Millisecond
	}
	if r.RestartBackoff == 0 {
		r.RestartBackoff = 10 * time.Second
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.procs = map[string]*proc{}
	defer r.stopAll()
	t := r.Clock.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if err := r.sync(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error(err, "Syncing pods failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		}
	}
}

// Running returns the keys (namespace/name) of the Pods with a live process, sorted.
func (r *Runner) Running() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k, p := range r.procs {
		if p.cmd != nil && p.exitErr == nil {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// HealthAddress returns the base URL (http://127.0.0.1:<port>) of the health endpoint the runner gave
// the process of the Pod namespace/name, or "" when none runs.
func (r *Runner) HealthAddress(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.procs[key]; p != nil {
		return p.baseURL
	}
	return ""
}

// Args returns the arguments the runner gave the process of the Pod namespace/name, or nil when none
// runs.
func (r *Runner) Args(key string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.procs[key]; p != nil && p.cmd != nil {
		return append([]string(nil), p.args...)
	}
	return nil
}

func (r *Runner) sync(ctx context.Context) error {
	pods := &corev1.PodList{}
	sel := r.Selector
	if sel == nil {
		var err error
		if sel, err = labels.Parse(ManagedByLabel); err != nil {
			return err
		}
	}
	if err := r.Client.List(ctx, pods, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		key := pod.Namespace + "/" + pod.Name
		seen[key] = true
		r.mu.Lock()
		p := r.procs[key]
		r.mu.Unlock()
		if p != nil && p.uid != string(pod.UID) {
			r.stop(key, p)
			p = nil
		}
		if pod.DeletionTimestamp != nil {
			if p != nil {
				r.stop(key, p)
			}
			// Without a kubelet nothing confirms the deletion: do it, as a kubelet would.
			_ = client.IgnoreNotFound(r.Client.Delete(ctx, pod, client.GracePeriodSeconds(0)))
			continue
		}
		if p == nil || p.setup != nil {
			prev := p
			p = r.launch(ctx, pod)
			p.backoff = r.RestartBackoff
			r.mu.Lock()
			r.procs[key] = p
			r.mu.Unlock()
			switch {
			case p.setup != nil && (prev == nil || prev.setup == nil || prev.setup.Message != p.setup.Message):
				r.Log.Info("Pod container cannot be created yet; trying again", "pod", key, "reason", p.setup.Reason, "message", p.setup.Message)
			case p.setup == nil && prev != nil:
				r.Log.Info("Pod container created after waiting", "pod", key, "waitedFor", prev.setup.Message)
			}
		} else if next := r.restartDue(ctx, pod, p); next != nil {
			p = next
			r.mu.Lock()
			r.procs[key] = p
			r.mu.Unlock()
			r.Log.Info("Restarted pod process", "pod", key, "restarts", p.restarts, "lastExitCode", p.last.ExitCode)
		}
		if err := r.report(ctx, pod, p); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			r.Log.Error(err, "Reporting pod status failed", "pod", key)
		}
	}
	r.mu.Lock()
	var gone []string
	for key := range r.procs {
		if !seen[key] {
			gone = append(gone, key)
		}
	}
	r.mu.Unlock()
	for _, key := range gone {
		r.mu.Lock()
		p := r.procs[key]
		r.mu.Unlock()
		r.stop(key, p)
	}
	return nil
}

func (r *Runner) binaryFor(image string) string {
	if b, ok := r.Images[image]; ok {
		return b
	}
	repo := image
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		repo = image[:i]
	}
	return r.Images[repo]
}

// launch writes the Pod's volumes and starts its first container's program.
func (r *Runner) launch(ctx context.Context, pod *corev1.Pod) *proc {
	key := pod.Namespace + "/" + pod.Name
	p := &proc{uid: string(pod.UID), done: make(chan struct{})}
	if len(pod.Spec.Containers) == 0 {
		p.unrunnable = true
		return p
	}
	c := pod.Spec.Containers[0]
	bin := r.binaryFor(c.Image)
	if bin == "" {
		r.Log.Info("Pod image has no local binary; it stays Pending", "pod", key, "image", c.Image)
		p.unrunnable = true
		close(p.done)
		return p
	}
	dir := filepath.Join(r.Dir, "pods", pod.Namespace, pod.Name)
	mounts, err := r.writeVolumes(ctx, pod, c, dir)
	if err != nil {
		p.setup = &corev1.ContainerStateWaiting{Reason: "ContainerCreating", Message: "MountVolume.SetUp failed: " + err.Error()}
		close(p.done)
		return p
	}
	env, err := r.environment(ctx, pod, c, mounts)
	if err != nil {
		p.setup = &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: err.Error()}
		close(p.done)
		return p
	}
	// Every replica gets its own ports: rewrite the config file's listen addresses.
	health, metrics := freePort(), freePort()
	for _, e := range env {
		if strings.HasPrefix(e, "RETRYOPS_CONFIG=") {
			path := strings.TrimPrefix(e, "RETRYOPS_CONFIG=")
			if err := rewriteListen(path, "127.0.0.1:"+health, "127.0.0.1:"+metrics); err != nil {
				r.Log.Error(err, "Rewriting the config file failed", "pod", key)
			}
		}
	}
	if kc, err := r.serviceAccountKubeconfig(ctx, pod, dir); err != nil {
		r.Log.Error(err, "No ServiceAccount token for the pod; it runs without API access", "pod", key)
	} else if kc != "" {
		env = append(env, "KUBECONFIG="+kc)
	}
	p.baseURL = "http://127.0.0.1:" + health
	p.healthURL = p.baseURL + "/readyz"
	// As a kubelet: $(VAR) in the command and arguments from the container's environment.
	p.args = expandArgs(append(append([]string(nil), c.Command[min(1, len(c.Command)):]...), c.Args...), env)
	if r.HealthFlag != "" {
		ports := map[string]string{r.HealthFlag: health}
		for _, f := range r.ListenFlags {
			ports[f] = freePort()
		}
		p.args = setListenFlags(p.args, ports)
	}
	logFile, err := createLog(dir)
	if err != nil {
		p.exitErr = err
		close(p.done)
		return p
	}
	cmd := exec.Command(bin, p.args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		p.exitErr = err
		close(p.done)
		_ = logFile.Close()
		return p
	}
	p.cmd, p.started = cmd, r.Clock.Now()
	r.Log.Info("Started pod process", "pod", key, "pid", cmd.Process.Pid, "log", logFile.Name(), "health", p.healthURL)
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		code := -1
		if cmd.ProcessState != nil {
			code = cmd.ProcessState.ExitCode()
		}
		term := &corev1.ContainerStateTerminated{
			ExitCode: int32(code), Reason: "Completed",
			StartedAt: metav1.NewTime(p.started), FinishedAt: metav1.NewTime(r.Clock.Now()),
		}
		if err != nil {
			term.Reason, term.Message = "Error", err.Error()
		}
		r.mu.Lock()
		p.exitErr = fmt.Errorf("exited: %w", err)
		if err == nil {
			p.exitErr = errors.New("exited: status 0")
		}
		p.exited = term
		r.mu.Unlock()
		close(p.done)
	}()
	return p
}

// restartDue starts the Pod's process again, as a kubelet would (a Deployment's Pods restart
// always), once p's process exited and its back-off has passed, and returns the new proc; nil while
// p runs or waits.
func (r *Runner) restartDue(ctx context.Context, pod *corev1.Pod, p *proc) *proc {
	r.mu.Lock()
	exited := p.exited
	r.mu.Unlock()
	if exited == nil || r.Clock.Now().Before(exited.FinishedAt.Add(p.backoff)) {
		return nil
	}
	next := r.launch(ctx, pod)
	next.restarts, next.last = p.restarts+1, exited
	next.backoff = min(2*p.backoff, MaxRestartBackoff)
	if exited.FinishedAt.Sub(exited.StartedAt.Time) >= MaxRestartBackoff {
		next.backoff = r.RestartBackoff
	}
	return next
}

func (r *Runner) stop(key string, p *proc) {
	r.mu.Lock()
	delete(r.procs, key)
	r.mu.Unlock()
	if p == nil || p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-r.Clock.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	r.Log.Info("Stopped pod process", "pod", key)
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	keys := make([]string, 0, len(r.procs))
	for k := range r.procs {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, k := range keys {
		r.mu.Lock()
		p := r.procs[k]
		r.mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); r.stop(k, p) }()
	}
	wg.Wait()
}

// createLog creates the log file of a Pod's process in dir (made if the Pod mounts nothing).
func createLog(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(dir, "log"))
}
