package dispatcher_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/policy"
)

// TestAnOpenBreakerPausesPartitionsNoRecordWasFetchedFrom: the engine knows every partition
// assigned to it, not only those a fetch has returned records from. Kafka's fetch sessions
// (KIP-227) leave a partition with nothing new out of every response after the first, and
// franz-go drops a first response with no record at all; so a retry tier that no record has
// reached yet was never seen by a poll, and an open breaker left it fetching. Here the first
// polls come back empty before anything is produced; then the breaker opens on the source's
// records and every partition of every topic pauses, in franz-go too.
func TestAnOpenBreakerPausesPartitionsNoRecordWasFetchedFrom(t *testing.T) {
	pol := simplePolicy(6, time.Second)
	pol.CircuitBreaker = &policy.CircuitBreaker{FailureRatioPercent: 50, MinimumRequests: 2, Window: dt.PD(10 * time.Second),
		OpenDuration: dt.PD(time.Hour), HalfOpenRequests: 1, CloseSuccessPercent: 50}
	p := newPipeline(t, "unfetched", 2, pol, func(*dt.Request) dt.Response { return dt.Response{Status: 503} })
	p.cfg.Delivery.MaxInFlight = 1
	reg := prometheus.NewRegistry()
	var polls atomic.Int32
	r := start(t, dispatcher.Options{Config: p.cfg, Registerer: reg, Clock: clocktesting.NewFakeClock(time.Now())},
		func(e *dispatcher.Engine) { e.SetPollHook(func() { polls.Add(1) }) })
	// Two polls returned with nothing to fetch: the session is open and its first, full, response
	// was empty.
	dt.Eventually(t, 20*time.Second, func() bool { return polls.Load() >= 3 }, "two empty polls")

	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("a")},
		&kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("b")})
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.CircuitState) == 2 }, "the breaker open")
	all := 2 * (1 + len(p.cfg.Topics.Retries))
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.PausedPartitions) == float64(all) },
		"all %d partitions paused while the breaker is open", all)
	dt.Eventually(t, 20*time.Second, func() bool {
		n := 0
		for _, ps := range r.e.Client().PauseFetchPartitions(nil) {
			n += len(ps)
		}
		return n == all
	}, "franz-go's paused set holding all %d partitions", all)
}
