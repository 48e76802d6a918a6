package dispatcher_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// TestGracefulShutdown: cancelling Run (what SIGTERM does in the binary) lets in-flight deliveries
// that finish within drainTimeout complete and be committed, abandons the one that does not (its
// context is cancelled and it is not committed), leaves the group; a restart delivers the abandoned
// record again and nothing else twice. The health endpoints follow: /readyz is 503 before the group
// is joined and after the stop, 200 in between. The drain timeout runs on a fake clock that the test
// steps only once "drains" is committed, so how fast the machine answers does not decide which is
// which.
func TestGracefulShutdown(t *testing.T) {
	released := make(chan struct{})
	drainsGo := make(chan struct{})
	var drainsOnce sync.Once
	letDrainsFinish := func() { drainsOnce.Do(func() { close(drainsGo) }) }
	p := newPipeline(t, "shutdown", 1, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		switch string(r.Body) {
		case "drains": // finishes during the drain, when the test lets it
			<-drainsGo
			return dt.Response{}
		case "abandoned": // outlives the drain the first time
			if r.Attempt == 1 && len(released) == 0 {
				return dt.Response{Delay: time.Minute}
			}
		}
		return dt.Response{}
	})
	t.Cleanup(letDrainsFinish) // before the sink's Close, which waits for its handlers
	p.cfg.Delivery.Ordering = config.OrderingUnordered
	p.cfg.DrainTimeout = dt.PD(time.Second)
	p.cfg.CommitInterval = dt.PD(0) // a finished record is committed at once, while the stop drains too
	p.cfg.Listen = config.Listen{MetricsAddress: "127.0.0.1:0", HealthAddress: "127.0.0.1:0"}

	fc := clocktesting.NewFakeClock(time.Now())
	e, err := dispatcher.New(dispatcher.Options{Config: p.cfg, Handler: dispatcher.NewHTTPSink(p.cfg.Sink.URL, 10), Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dispatcher.Serve(p.cfg.Listen, e.Registry(), e, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Shutdown(context.Background()) }()
	metricsURL, healthURL := "http://"+srv.MetricsAddr().String(), "http://"+srv.HealthAddr().String()
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(healthURL + dispatcher.PathReadyz); code != 503 {
		t.Errorf("/readyz before joining: %d", code)
	}
	if code, _ := get(healthURL + dispatcher.PathHealthz); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("r" + strconv.Itoa(i))})
	}
	recs = append(recs, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("drains")},
		&kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("abandoned")})
	dt.Produce(t, p.prod, recs...)
	p.sink.WaitFor(t, 10*time.Second, func([]*dt.Request) bool { return p.sink.Count() >= 20 }, "the first 20 delivered")
	dt.Eventually(t, 10*time.Second, e.Ready, "ready")
	if code, _ := get(healthURL + dispatcher.PathReadyz); code != 200 {
		t.Errorf("/readyz while consuming: %d", code)
	}
	if _, body := get(metricsURL + dispatcher.PathMetrics); !strings.Contains(body, metrics.RecordsTotal) {
		t.Errorf("/metrics lacks %s", metrics.RecordsTotal)
	}

	// Stop while "drains" and "abandoned" are in flight; "drains" finishes and is committed, then
	// the drain timeout passes.
	dt.Eventually(t, 10*time.Second, func() bool { return p.sink.InFlight() == 2 }, "drains and abandoned in flight")
	cancel()
	letDrainsFinish()
	abandonedOff := recs[21].Offset
	dt.Eventually(t, 10*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == abandonedOff },
		"drains committed during the drain")
	// The stop may not have set its drain timer yet: the clock moves on until Run returns.
	dt.Eventually(t, 20*time.Second, func() bool {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			return true
		default:
			fc.Step(100 * time.Millisecond)
			return false
		}
	}, "Run returned after the drain timeout")
	if code, _ := get(healthURL + dispatcher.PathReadyz); code != 503 {
		t.Errorf("/readyz after stopping: %d", code)
	}
	adm := kadm.NewClient(p.prod)
	os, err := adm.FetchOffsets(context.Background(), p.cfg.ConsumerGroup)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := os.Lookup(p.cfg.Topics.Source, 0); o.At != abandonedOff {
		t.Fatalf("committed %d after the stop, want %d (everything but the abandoned record)", o.At, abandonedOff)
	}
	// The group was left: no members.
	groups, err := adm.DescribeGroups(context.Background(), p.cfg.ConsumerGroup)
	if err != nil {
		t.Fatal(err)
	}
	if g := groups[p.cfg.ConsumerGroup]; len(g.Members) != 0 {
		t.Errorf("the group still has %d members", len(g.Members))
	}

	// Restart: only the abandoned record is delivered again, then new records once.
	close(released)
	released = make(chan struct{}, 1)
	released <- struct{}{}
	r := start(t, dispatcher.Options{Config: p.cfg})
	more := []*kgo.Record{}
	for i := range 10 {
		more = append(more, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("after" + strconv.Itoa(i))})
	}
	dt.Produce(t, p.prod, more...)
	p.sink.WaitFor(t, 10*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == len(recs)+len(more)
	}, "all delivered after the restart")
	r.stop(t)
	for k, n := range p.sink.SuccessCounts() {
		if n != 1 {
			t.Errorf("%s delivered successfully %d times", k, n)
		}
	}
	abandonedKey := headers.IdempotencyKey(p.cfg.Topics.Source, 0, abandonedOff)
	if n := len(p.sink.ByKey(abandonedKey)); n != 2 {
		t.Errorf("the abandoned record was delivered %d times, want 2 (abandoned, then again after the restart)", n)
	}
}
