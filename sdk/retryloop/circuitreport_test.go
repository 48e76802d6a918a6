package retryloop_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
	"github.com/retryops/retry-operator/sdk/testutil/syncbuf"
)

// breakerConfig is a pipeline whose config asks for a circuit report and whose breaker opens after
// two failures and probes again 20ms later.
func breakerConfig(addrs []string, group string) *config.Config {
	pol := &policy.Spec{MaxAttempts: 1,
		CircuitBreaker: &policy.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 2, Window: dt.PD(time.Minute),
			OpenDuration: dt.PD(20 * time.Millisecond), HalfOpenRequests: 1, CloseSuccessPercent: 50}}
	cfg := dt.Config(addrs, group, "orders", "orders.dlq", pol, "")
	cfg.CircuitReport = &config.CircuitReport{ConfigMap: "orders-circuit"}
	return cfg
}

// runBreakerStorm runs a loop of cfg whose handler fails the first four records and delivers the
// rest, until the four are dead-lettered, the rest delivered and the breaker has changed state at
// least twice; it returns the loop's log.
func runBreakerStorm(t *testing.T, opts ...retryloop.Option) string {
	t.Helper()
	c := dt.Cluster(t, map[string]int32{"orders": 1, "orders.dlq": 1})
	cfg := breakerConfig(c.ListenAddrs(), "storm")
	var logs syncbuf.Buffer
	var mu sync.Mutex
	delivered := map[string]bool{}
	loop, err := retryloop.New(cfg, func(_ context.Context, r *kgo.Record) error {
		if strings.HasPrefix(string(r.Value), "fail") {
			return retryloop.HTTPStatus(503, errors.New("down"))
		}
		mu.Lock()
		delivered[string(r.Value)] = true
		mu.Unlock()
		return nil
	}, append([]retryloop.Option{retryloop.WithoutHTTP(), retryloop.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil)))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	prod := dt.Client(t, c)
	for i := range 4 {
		dt.Produce(t, prod, &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, "fail-%d", i)})
	}
	for i := range 4 {
		dt.Produce(t, prod, &kgo.Record{Topic: "orders", Value: fmt.Appendf(nil, "ok-%d", i)})
	}
	if dl := dt.ReadTopic(t, c, "orders.dlq", 4, 20*time.Second); len(dl) != 4 {
		t.Fatalf("%d dead letters, want 4", len(dl))
	}
	dt.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == 4 && strings.Count(logs.String(), "Circuit breaker changed state") >= 2
	}, "every record delivered after the breaker opened and closed; log:\n%s", &logs)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return logs.String()
}

// TestALoopWithoutAReporterRunsAndSaysSoOnce: the config asks for a circuit report but the consumer
// gave no WithCircuitReport: it consumes through breaker transitions, says once that it does not
// report, and never tries to.
func TestALoopWithoutAReporterRunsAndSaysSoOnce(t *testing.T) {
	logs := runBreakerStorm(t)
	if n := strings.Count(logs, "is not reported to the operator"); n != 1 {
		t.Errorf("%d lines say the state is not reported, want 1:\n%s", n, logs)
	}
	if strings.Contains(logs, "Could not report") || strings.Contains(logs, "will not be reported") {
		t.Errorf("a report was tried:\n%s", logs)
	}
}

// failingPatcher refuses every write, as an API server out of reach does.
type failingPatcher struct {
	mu     sync.Mutex
	writes int
}

func (f *failingPatcher) MergePatch(context.Context, string, []byte, string) error {
	f.mu.Lock()
	f.writes++
	f.mu.Unlock()
	return errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
}

// TestALoopWhoseReportFailsStillConsumes: with a connector whose API is out of reach the loop
// consumes as without one; the failing report is logged once per failing episode, not per
// transition or retry.
func TestALoopWhoseReportFailsStillConsumes(t *testing.T) {
	p := &failingPatcher{}
	logs := runBreakerStorm(t, retryloop.WithCircuitReport(func(string, func(string) string) (circuitstate.ConfigMapPatcher, error) {
		return p, nil
	}))
	p.mu.Lock()
	writes := p.writes
	p.mu.Unlock()
	if writes == 0 {
		t.Fatal("the reporter never wrote")
	}
	if n := strings.Count(logs, "Could not report the circuit breaker state"); n != 1 {
		t.Errorf("%d lines say the report failed after %d writes, want 1:\n%s", n, writes, logs)
	}
}

// TestALoopWhoseConnectorFailsStillConsumes: a connector that cannot reach the API (no kubeconfig,
// not in a cluster) costs one warning and the report.
func TestALoopWhoseConnectorFailsStillConsumes(t *testing.T) {
	logs := runBreakerStorm(t, retryloop.WithCircuitReport(func(string, func(string) string) (circuitstate.ConfigMapPatcher, error) {
		return nil, errors.New("no Kubernetes API configuration")
	}))
	if n := strings.Count(logs, "will not be reported to the operator"); n != 1 {
		t.Errorf("%d lines say the state will not be reported, want 1:\n%s", n, logs)
	}
}
