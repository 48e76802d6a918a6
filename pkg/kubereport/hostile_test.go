package kubereport

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestConnectRefusesAHostileKubeconfig: KUBECONFIG is whatever the consumer's environment says;
// Connect returns an error for anything but a kubeconfig, and returns: a FIFO no one writes would
// block clientcmd's read for ever and /dev/zero would fill the memory.
func TestConnectRefusesAHostileKubeconfig(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		g.Expect(os.WriteFile(p, []byte(content), 0o600)).To(Succeed())
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	g.Expect(syscall.Mkfifo(fifo, 0o600)).To(Succeed())
	t.Cleanup(func() { // on failure, unblock a reader left in open(2)
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	for _, tc := range []struct{ name, path string }{
		{"missing", filepath.Join(dir, "missing")},
		{"a directory", dir},
		{"garbage", write("garbage", "\x00\xff{{{: [")},
		{"empty", write("empty", "")},
		{"no current context", write("nocontext", "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n")},
		{"a context naming nothing", write("dangling", "apiVersion: v1\nkind: Config\ncurrent-context: x\ncontexts: [{name: x, context: {cluster: nope, user: nope}}]\n")},
		{"a server that is no URL", write("badserver", "apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: c, cluster: {server: \"::::\"}}]\ncontexts: [{name: x, context: {cluster: c}}]\n")},
		{"a FIFO", fifo},
		{"a device", "/dev/zero"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			t.Setenv("KUBECONFIG", tc.path)
			t.Setenv("KUBERNETES_SERVICE_HOST", "") // never in-cluster
			type result struct {
				err      error
				panicked any
			}
			done := make(chan result, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						done <- result{panicked: p}
					}
				}()
				_, err := Connect("shop", func(k string) string { return os.Getenv(k) })
				done <- result{err: err}
			}()
			var r result
			g.Eventually(done).Should(Receive(&r), "Connect returned")
			g.Expect(r.panicked).To(BeNil())
			g.Expect(r.err).To(HaveOccurred())
		})
	}
}

// TestAWriteToAnAPIServerThatNeverAnswersFails: a server that accepts and never answers makes the
// write fail (the Reporter logs and retries it) instead of holding it until the consumer stops.
func TestAWriteToAnAPIServerThatNeverAnswersFails(t *testing.T) {
	g := NewWithT(t)
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hang) })
	defer func(d time.Duration) { requestTimeout = d }(requestTimeout)
	requestTimeout = 100 * time.Millisecond
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\ncurrent-context: x\nclusters: [{name: c, cluster: {server: \""+
		srv.URL+"\"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"), 0o600)).To(Succeed())
	cms, err := Connect("shop", func(k string) string { return map[string]string{"KUBECONFIG": kubeconfig}[k] })
	g.Expect(err).NotTo(HaveOccurred())
	done := make(chan error, 1)
	go func() {
		done <- cms.MergePatch(context.Background(), "orders-circuit", []byte(`{"data":{}}`), "retryops-dispatcher")
	}()
	var werr error
	g.Eventually(done).Should(Receive(&werr), "the write returned")
	g.Expect(werr).To(HaveOccurred())
}
