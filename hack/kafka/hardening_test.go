package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// writeUsers writes a users file with mode perm and returns its path.
func writeUsers(t *testing.T, dir string, perm os.FileMode) string {
	t.Helper()
	b, err := json.Marshal([]user{{Mechanism: "SCRAM-SHA-512", User: "admin", Password: "admin-pass", Superuser: true}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "users.json")
	if err := os.WriteFile(path, b, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil { // whatever the umask
		t.Fatal(err)
	}
	return path
}

// TestUsersStayWithTheirOwner: a users file others may read is refused, and a data dir kfake keeps
// its users in (password-equivalent SCRAM salted passwords, PLAIN passwords) is made the owner's
// only, even when it already existed.
func TestUsersStayWithTheirOwner(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	_, err := options(0, "", 1, "", "", "", writeUsers(t, dir, 0o644), false)
	g.Expect(err).To(MatchError(ContainSubstring("others may read it (mode 0644): chmod 600 it")))

	data := filepath.Join(dir, "data")
	g.Expect(os.Mkdir(data, 0o755)).To(Succeed())
	_, err = options(0, data, 1, "", "", "", writeUsers(t, dir, 0o600), false)
	g.Expect(err).NotTo(HaveOccurred())
	info, err := os.Stat(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o700)))
}

// TestTheAuthenticationLogIsBounded: a user name is cut at maxLoggedUser bytes, and once the log
// reached its bound it says so in one last line and grows no more, so a reader cannot take a full
// log for a complete one.
func TestTheAuthenticationLogIsBounded(t *testing.T) {
	g := NewWithT(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "admin", "admin-pass"))
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	log := &syncBuffer{}
	const limit = 4 << 10
	logAuthenticationsUpTo(c, log, limit)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	attempt := func(user string) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RetryTimeout(time.Millisecond),
			kgo.SASL(scram.Auth{User: user, Pass: "x"}.AsSha512Mechanism()))
		g.Expect(err).NotTo(HaveOccurred())
		defer cl.Close()
		_ = cl.Ping(ctx)
	}
	lines := func() []string { return strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n") }

	long := strings.Repeat("u", 10*maxLoggedUser)
	attempt(long)
	g.Expect(lines()).To(HaveEach(Equal(`{"user":"` + long[:maxLoggedUser] + `"}`)))
	g.Eventually(func() int {
		attempt(long)
		return log.Len()
	}).WithTimeout(time.Minute).WithPolling(time.Millisecond).Should(BeNumerically(">", limit-maxLoggedUser-16))
	g.Eventually(func() string {
		attempt("another")
		l := lines()
		return l[len(l)-1]
	}).WithTimeout(time.Minute).WithPolling(time.Millisecond).Should(Equal(`{"user":"","full":true}`))
	size := log.Len()
	g.Expect(size).To(BeNumerically("<=", limit+len(`{"user":"","full":true}`)+1))
	attempt("after")
	g.Expect(log.Len()).To(Equal(size), "nothing is logged after the last line")
}

// syncBuffer is a bytes.Buffer the broker's goroutine writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}
