package e2e

import (
	"io/fs"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"
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
	logs := []string{"logs/manager.log", "runner.log"}
	_ = filepath.WalkDir(filepath.Join(dir, "pods"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "log" {
			rel, _ := filepath.Rel(dir, p)
			logs = append(logs, rel)
		}
		return nil
	})
	return logs
}
