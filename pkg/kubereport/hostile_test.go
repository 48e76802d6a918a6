package kubereport

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

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
