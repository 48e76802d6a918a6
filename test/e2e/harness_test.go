package e2e

import (
	"context"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/retryops/retry-operator/internal/devenv"
)

// serveSink serves h on a loopback port until the test ends and returns the listener.
func serveSink(t *testing.T, h http.Handler) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l
}

// every calls f at once and then every d in the background, until the returned stop is called
// (stop waits for the last call to return; calling it again does nothing).
func every(d time.Duration, f func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(d)
		defer tick.Stop()
		for {
			f()
			select {
			case <-quit:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// stackLogs lists, relative to the stack's dir, the manager's and the runner's logs and every pod's
// output.
func stackLogs(dir string) []string {
	logs := []string{"logs/kafka.log", "logs/manager.log", "runner.log"}
	_ = filepath.WalkDir(filepath.Join(dir, "pods"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "log" {
			rel, _ := filepath.Rel(dir, p)
			logs = append(logs, rel)
		}
		return nil
	})
	return logs
}

// startStack builds the binaries and starts the `make run` stack in a new directory, with the
// dispatcher image name image; it is stopped when the test ends, after its logs' tails are shown if
// the test failed. It returns the stack and its directory.
func startStack(t *testing.T, image string) (*devenv.Stack, string) {
	t.Helper()
	return startStackWith(t, image, devenv.KafkaPlaintext)
}

// startStackWith is startStack with the embedded Kafka secured as security says.
func startStackWith(t *testing.T, image string, security devenv.KafkaSecurity) (*devenv.Stack, string) {
	t.Helper()
	dir := t.TempDir()
	buildBinaries(t, filepath.Join(dir, "bin"))
	logFile, err := os.Create(filepath.Join(dir, "runner.log"))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := devenv.StartStack(context.Background(), devenv.StackOptions{
		Dir: dir, Bin: filepath.Join(dir, "bin"), DispatcherImage: image,
		ManagerArgs: []string{"--status-refresh-interval=2s"}, Log: zap.New(zap.WriteTo(logFile)), KafkaSecurity: security,
	}, t.Logf)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
		if stack != nil {
			stack.Stop()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return stack, dir
}

// dumpLogs shows the tail of every log of the stack in dir, without the "Fetch error" lines a
// dispatcher may repeat (counted instead).
func dumpLogs(t *testing.T, dir string) {
	for _, f := range stackLogs(dir) {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		var kept []string
		fetchErrs := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, `"msg":"Fetch error"`) {
				fetchErrs++
				continue
			}
			kept = append(kept, line)
		}
		t.Logf("---- %s (%d bytes, %d \"Fetch error\" lines left out; tail)\n%s", f, len(b), fetchErrs, tail([]byte(strings.Join(kept, "\n")), 6000))
	}
}
