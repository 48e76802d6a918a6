package franz

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// brokerProcessEnv, set in the environment of this test binary, makes it run a kfake broker instead
// of the tests (see TestMain): the tests that measure the client's memory need a broker whose own
// memory (the records it holds, the responses it builds) is not in the heap they measure.
const brokerProcessEnv = "RETRYOPS_TEST_KFAKE_BROKER"

func TestMain(m *testing.M) {
	if os.Getenv(brokerProcessEnv) != "" {
		os.Exit(runBrokerProcess())
	}
	os.Exit(m.Run())
}

// runBrokerProcess runs a single-broker kfake cluster on a free local port, prints its address on
// the first line of stdout, and stops when stdin closes (the test that started it ended or died).
func runBrokerProcess() int {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0), kfake.DefaultNumPartitions(1))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		return 1
	}
	defer c.Close()
	fmt.Println(c.ListenAddrs()[0])
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// startBrokerProcess starts a kfake broker in a child process (this test binary again, see
// TestMain) and returns its address; the broker stops at test end.
func startBrokerProcess(tb testing.TB) string {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$") //nolint:gosec // this test binary
	cmd.Env = append(os.Environ(), brokerProcessEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start the broker process: %v", err)
	}
	tb.Cleanup(func() {
		_ = stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		tb.Fatalf("read the broker's address: %v", err)
	}
	return strings.TrimSpace(line)
}
