//go:build unix

package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/retryops/retry-operator/sdk/config"
)

// TestLoadReadsOnlyARegularFile: RETRYOPS_CONFIG may name anything; opening a FIFO no one writes
// blocks for ever, and a device never ends. A ConfigMap mount's symlinks are followed.
func TestLoadReadsOnlyARegularFile(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	good := writeFile(t, dir, "good.json", `{`+minimal+`}`)
	// A ConfigMap volume: config.json -> ..data/config.json, ..data -> ..2026_01_01/.
	g.Expect(os.Mkdir(filepath.Join(dir, "..2026"), 0o700)).To(Succeed())
	writeFile(t, filepath.Join(dir, "..2026"), "config.json", `{`+minimal+`}`)
	g.Expect(os.Symlink("..2026", filepath.Join(dir, "..data"))).To(Succeed())
	g.Expect(os.Symlink(filepath.Join("..data", "config.json"), filepath.Join(dir, "mounted.json"))).To(Succeed())
	g.Expect(os.Symlink("loop", filepath.Join(dir, "loop"))).To(Succeed())
	g.Expect(os.Symlink("nowhere", filepath.Join(dir, "dangling"))).To(Succeed())
	fifo := filepath.Join(dir, "fifo")
	g.Expect(syscall.Mkfifo(fifo, 0o600)).To(Succeed())
	t.Cleanup(func() { // on failure, unblock a reader left in open(2)
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})

	for _, path := range []string{good, filepath.Join(dir, "mounted.json")} {
		_, err := config.Load(path, envOf(nil))
		g.Expect(err).NotTo(HaveOccurred(), path)
	}
	for _, tc := range []struct{ path, want string }{
		{fifo, "is not a regular file"},
		{dir, "is not a regular file"},
		{"/dev/zero", "is not a regular file"},
		{filepath.Join(dir, "loop"), "too many levels of symbolic links"},
		{filepath.Join(dir, "dangling"), "no such file or directory"},
	} {
		path, want := tc.path, tc.want
		done := make(chan error, 1)
		go func() { _, err := config.Load(path, envOf(nil)); done <- err }()
		var err error
		g.Eventually(done).Should(Receive(&err), "Load(%s) returned", path)
		g.Expect(err).To(MatchError(ContainSubstring(want)), path)
		g.Expect(err).To(MatchError(ContainSubstring(config.EnvConfig)), path)
		g.Expect(errors.Is(err, config.ErrUnsupportedVersion)).To(BeFalse())
	}
}
