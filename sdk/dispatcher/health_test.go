package dispatcher_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
)

// healthz serves e's health endpoints and returns a probe of /healthz or /readyz: true on 200.
func healthz(t *testing.T, e *dispatcher.Engine) func(path string) bool {
	t.Helper()
	s, err := dispatcher.Serve(config.Listen{MetricsAddress: config.Disabled, HealthAddress: "127.0.0.1:0"}, nil, e, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	base := "http://" + s.HealthAddr().String()
	return func(path string) bool {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
}

func startOnClock(t *testing.T, p *pipeline, fc *clocktesting.FakeClock, h dispatcher.Handler, prep func(*dispatcher.Engine)) *running {
	t.Helper()
	if err := p.cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	e, err := dispatcher.New(dispatcher.Options{Config: p.cfg, Handler: h, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(e)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	dt.Eventually(t, 20*time.Second, e.Ready, "the engine joined its group")
	return r
}

var succeed = dispatcher.HandlerFunc(func(context.Context, *dispatcher.Delivery) dispatcher.Result {
	return dispatcher.Result{Success: true}
})

// TestLiveWhileHealthy: an idle, healthy engine stays live as its clock advances well past the
// poll loop's bound.
func TestLiveWhileHealthy(t *testing.T) {
	p := newPipeline(t, "live-healthy", 1, simplePolicy(2, time.Second), nil)
	fc := clocktesting.NewFakeClock(time.Now())
	r := startOnClock(t, p, fc, succeed, nil)
	probe := healthz(t, r.e)
	for i := range 5 {
		waitBeat(t, r.e, fc) // the idle poll loop beats at least every second
		fc.Step(20 * time.Second)
		if !probe(dispatcher.PathHealthz) {
			t.Fatalf("/healthz failed after %v of an idle, healthy engine", time.Duration(i+1)*20*time.Second)
		}
	}
}

// TestLiveFailsWhenPollLoopStalls: a poll loop that has not gone round for longer than its bound
// fails /healthz; once it goes round again the engine is live again.
func TestLiveFailsWhenPollLoopStalls(t *testing.T) {
	p := newPipeline(t, "live-poll-stall", 1, simplePolicy(2, time.Second), nil)
	fc := clocktesting.NewFakeClock(time.Now())
	stall, stalled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := startOnClock(t, p, fc, succeed, func(e *dispatcher.Engine) {
		e.SetPollHook(func() {
			select {
			case <-stall:
				once.Do(func() { close(stalled); <-release })
			default:
			}
		})
	})
	probe := healthz(t, r.e)
	close(stall)
	closed(t, stalled, "the poll loop reaching the stall")
	fc.Step(20 * time.Second)
	if !probe(dispatcher.PathHealthz) {
		t.Fatal("/healthz failed 20s into a stall: within the bound")
	}
	fc.Step(20 * time.Second)
	if probe(dispatcher.PathHealthz) {
		t.Fatal("/healthz ok with the poll loop stalled for 40s")
	}
	close(release)
	dt.Eventually(t, 20*time.Second, func() bool { return probe(dispatcher.PathHealthz) }, "live again once the poll loop goes round")
}

// TestLiveFailsWhenWorkerStuck: a delivery running past attemptTimeout plus the margin (the
// handler ignores its context) fails /healthz, though the poll loop is fine.
func TestLiveFailsWhenWorkerStuck(t *testing.T) {
	pol := simplePolicy(2, time.Second)
	pol.AttemptTimeout = dt.PD(time.Second)
	p := newPipeline(t, "live-worker-stuck", 1, pol, nil)
	fc := clocktesting.NewFakeClock(time.Now())
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := dispatcher.HandlerFunc(func(context.Context, *dispatcher.Delivery) dispatcher.Result {
		entered <- struct{}{}
		<-release
		return dispatcher.Result{Success: true}
	})
	r := startOnClock(t, p, fc, h, nil)
	defer close(release)
	probe := healthz(t, r.e)
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("stuck")})
	received(t, entered, "the delivery")
	fc.Step(20 * time.Second)
	waitBeat(t, r.e, fc) // the poll loop beats
	if !probe(dispatcher.PathHealthz) {
		t.Fatal("/healthz failed 20s into a delivery: within attemptTimeout plus the margin")
	}
	fc.Step(20 * time.Second)
	waitBeat(t, r.e, fc)
	if probe(dispatcher.PathHealthz) {
		t.Fatal("/healthz ok with a delivery stuck for 40s (attemptTimeout 1s)")
	}
}

// TestNotReadyAfterLoss: once every partition is lost, /readyz fails until partitions are
// assigned again.
func TestNotReadyAfterLoss(t *testing.T) {
	p := newPipeline(t, "ready-lost", 1, simplePolicy(2, time.Second), nil)
	fc := clocktesting.NewFakeClock(time.Now())
	r := startOnClock(t, p, fc, succeed, nil)
	probe := healthz(t, r.e)
	if !probe(dispatcher.PathReadyz) {
		t.Fatal("/readyz failed after joining")
	}
	src := p.cfg.Topics.Source
	tps := map[string][]int32{src: {0}}
	for _, tier := range dt.TierTopics(p.cfg) {
		tps[tier] = []int32{0}
	}
	r.e.LosePartitions(tps)
	if probe(dispatcher.PathReadyz) {
		t.Fatal("/readyz ok with every partition lost")
	}
	r.e.AssignPartitions(map[string][]int32{src: {0}})
	if !probe(dispatcher.PathReadyz) {
		t.Fatal("/readyz failed after partitions were assigned again")
	}
}

// TestNotLiveAfterRunFailed: a Run that ends with an error (the Kafka client closed under it)
// leaves /healthz failing.
func TestNotLiveAfterRunFailed(t *testing.T) {
	p := newPipeline(t, "live-run-failed", 1, simplePolicy(2, time.Second), nil)
	fc := clocktesting.NewFakeClock(time.Now())
	r := startOnClock(t, p, fc, succeed, nil)
	probe := healthz(t, r.e)
	r.e.Client().Close()
	if err := received(t, r.done, "Run returning after its client was closed"); err == nil {
		t.Fatal("Run returned nil after its client was closed")
	}
	r.stopped = true
	r.cancel()
	if probe(dispatcher.PathHealthz) {
		t.Fatal("/healthz ok after Run failed")
	}
}

// waitBeat waits until the poll loop has gone round at the fake clock's present time.
func waitBeat(t *testing.T, e *dispatcher.Engine, fc *clocktesting.FakeClock) {
	t.Helper()
	dt.Eventually(t, 10*time.Second, func() bool { return !e.LastBeat().Before(fc.Now()) },
		"the poll loop going round at the fake clock's present time %v", fc.Now())
}
