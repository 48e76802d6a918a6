package retryloop_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// observedLoop is a loop over a one-partition source on kfake, without HTTP, handling every record
// at once; it is not running.
func observedLoop(t *testing.T, group string, opts ...retryloop.Option) (*retryloop.Loop, *kgo.Client, *config.Config) {
	t.Helper()
	src, dlq := group+".src", group+".dlq"
	pol := &policy.Spec{MaxAttempts: 1, Backoff: policy.Backoff{InitialDelay: dt.D(50 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)}}
	c := dt.Cluster(t, map[string]int32{src: 1, dlq: 1})
	cfg := dt.Config(c.ListenAddrs(), group, src, dlq, pol, "")
	cfg.Listen = config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled}
	loop, err := retryloop.New(cfg, func(context.Context, *kgo.Record) error { return nil }, append(opts, retryloop.WithoutHTTP())...)
	if err != nil {
		t.Fatal(err)
	}
	return loop, dt.Client(t, c), cfg
}

// run runs loop until the test ends, and returns a function that stops it and waits for Run.
func run(t *testing.T, loop *retryloop.Loop) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// families gathers g and returns the names of its metric families.
func families(g prometheus.Gatherer) ([]string, error) {
	mfs, err := g.Gather()
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	return names, err
}

// TestWithRegistryServesTheLoopsMetricsFromTheCallersRegistry: WithRegistry's registry is the
// loop's Gatherer and receives the engine's metrics (and only what the caller registered besides:
// no Go or process collector of the loop's own).
func TestWithRegistryServesTheLoopsMetricsFromTheCallersRegistry(t *testing.T) {
	g := NewWithT(t)
	reg := prometheus.NewRegistry()
	loop, prod, cfg := observedLoop(t, "registry", retryloop.WithRegistry(reg))
	g.Expect(loop.Gatherer()).To(BeIdenticalTo(reg))

	run(t, loop)
	dt.Produce(t, prod, &kgo.Record{Topic: cfg.Topics.Source, Value: []byte("ok")})
	g.Eventually(func() ([]string, error) { return families(reg) }, 20*time.Second, 50*time.Millisecond).
		Should(ContainElements(metrics.RecordsTotal, metrics.DeliveryAttemptsTotal), "the engine's metrics on the caller's registry")
	g.Expect(families(reg)).NotTo(ContainElement("go_goroutines"), "the caller's registry gets no collector it did not register")
}

// TestDefaultRegistryHasTheGoAndProcessCollectors: without WithRegistry the loop's Gatherer is a
// registry of its own with the engine's metrics and the Go and process collectors.
func TestDefaultRegistryHasTheGoAndProcessCollectors(t *testing.T) {
	g := NewWithT(t)
	loop, _, _ := observedLoop(t, "default-registry")
	g.Expect(loop.Gatherer()).NotTo(BeIdenticalTo(prometheus.DefaultGatherer))
	g.Expect(families(loop.Gatherer())).To(ContainElements("go_goroutines", "process_start_time_seconds", metrics.Ready))
}

// TestReadyFollowsTheGroup: a loop is not ready before it runs, ready once it joined its group,
// and not ready once stopped.
func TestReadyFollowsTheGroup(t *testing.T) {
	g := NewWithT(t)
	loop, _, _ := observedLoop(t, "ready")
	g.Expect(loop.Ready()).To(BeFalse(), "before Run")

	stop := run(t, loop)
	g.Eventually(loop.Ready, 20*time.Second, 20*time.Millisecond).Should(BeTrue(), "once the group is joined")
	stop()
	g.Expect(loop.Ready()).To(BeFalse(), "after Run returned")
}
