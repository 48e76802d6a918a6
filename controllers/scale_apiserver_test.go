package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// apiServerProfileSeconds is the length of each CPU profile of the API server: back to back, since
// a run's time to Ready is not known when a profile starts.
const apiServerProfileSeconds = 10

// profileAPIServer records CPU profiles of the run's kube-apiserver (its /debug/pprof, on by
// default) to $SCALE_APISERVER_PROFILE_DIR/apiserver-<name>-<i>.pprof, back to back, until the
// returned stop is called; stop waits for the profile under way. Without the variable it does
// nothing. `go tool pprof -top -cum dir/apiserver-<name>-*.pprof` merges them.
func profileAPIServer(tb testing.TB, cfg *rest.Config, name string) (stop func()) {
	tb.Helper()
	dir := os.Getenv("SCALE_APISERVER_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var failed error // read after wg.Wait
	wg.Go(func() {
		for i := 0; ctx.Err() == nil && failed == nil; i++ {
			failed = fetchProfile(hc, cfg.Host, filepath.Join(dir, fmt.Sprintf("apiserver-%s-%02d.pprof", name, i)))
		}
	})
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			if failed != nil {
				tb.Errorf("profiling the API server: %v", failed)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "apiserver-"+name+"-*.pprof"))
			sort.Strings(files)
			tb.Logf("API server CPU profiles: %s", strings.Join(files, " "))
		})
	}
	// Also on a failed run, so the goroutine ends with it.
	tb.Cleanup(stop)
	return stop
}

// fetchProfile is not cancelled with the run: stopping waits for the profile under way.
func fetchProfile(hc *http.Client, host, path string) error {
	url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(host, "/"), apiServerProfileSeconds)
	resp, err := hc.Get(url) //nolint:noctx // see fetchProfile
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
