package dispatcher_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// holdWrite holds the first produce request to topic in the broker (kfake SleepControl) until the
// returned release is called; held is closed once it is held.
func holdWrite(t *testing.T, p *pipeline, topic string) (held <-chan struct{}, release func()) {
	t.Helper()
	id := topicID(t, p, topic)
	h, r := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	release = func() { released.Do(func() { close(r) }) }
	t.Cleanup(release)
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		for _, rt := range kr.(*kmsg.ProduceRequest).Topics {
			if rt.Topic == topic || rt.TopicID == id {
				once.Do(func() {
					close(h)
					p.c.SleepControl(func() { <-r })
				})
			}
		}
		return nil, nil, false
	})
	return h, release
}

// byValueHandler delivers by value: "dead" is undeliverable, "retry" fails its first attempt
// (503), anything else succeeds; it counts the successes per value.
type byValueHandler struct {
	mu sync.Mutex
	ok map[string]int
}

func (h *byValueHandler) Deliver(_ context.Context, d *dispatcher.Delivery) dispatcher.Result {
	switch v := string(d.Record.Value); {
	case v == "dead":
		return dispatcher.Result{Undeliverable: true}
	case v == "retry" && d.Attempt == 1:
		return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}
	default:
		h.mu.Lock()
		h.ok[v]++
		h.mu.Unlock()
		return dispatcher.Result{Success: true}
	}
}

func (h *byValueHandler) delivered(v string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok[v]
}

// TestNoCommitBeforeTheWriteIsAcknowledged: a record whose dead letter (or retry record) the
// broker holds unacknowledged is not committed, nor is the delivered record behind it, even after
// the committer has committed a record finished later on another partition; once the write is
// acknowledged both are.
func TestNoCommitBeforeTheWriteIsAcknowledged(t *testing.T) {
	for _, tc := range []struct{ name, value string }{{"dead letter", "dead"}, {"retry record", "retry"}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, "review-ack-"+tc.value, 2, simplePolicy(2, 10*time.Millisecond), nil)
			p.cfg.Delivery.Ordering = config.OrderingUnordered // the record behind does not wait for the first one's fate
			src := p.cfg.Topics.Source
			dest := p.cfg.Topics.DeadLetter
			if tc.value == "retry" {
				dest = p.cfg.Topics.Retries[0].Name
			}
			held, release := holdWrite(t, p, dest)
			h := &byValueHandler{ok: map[string]int{}}
			start(t, dispatcher.Options{Config: p.cfg, Handler: h})
			prod := dt.Client(t, p.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))

			dt.Produce(t, prod, &kgo.Record{Topic: src, Partition: 0, Value: []byte(tc.value)},
				&kgo.Record{Topic: src, Partition: 0, Value: []byte("behind")})
			<-held
			dt.Eventually(t, 20*time.Second, func() bool { return h.delivered("behind") == 1 }, "the record behind delivered")
			dt.Produce(t, prod, &kgo.Record{Topic: src, Partition: 1, Value: []byte("later")})
			dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 1) == 1 }, "the later record committed")
			if c := p.committed(t, src, 0); c > 0 {
				t.Fatalf("partition 0 committed to %d while its first record's write is unacknowledged", c)
			}
			release()
			dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 0) == 2 }, "both records committed once acknowledged")
		})
	}
}

// TestAcknowledgementAfterRevocation: a dead letter acknowledged after its partition was
// revoked (past the drain timeout) settles into nothing: its partition is not committed past it,
// the in-flight gauge comes back to 0 (not below), and the single delivery slot still admits one
// delivery at a time: the revocation released the slot once, the late settle did not release it
// again.
func TestAcknowledgementAfterRevocation(t *testing.T) {
	p := newPipeline(t, "review-ack-revoke", 2, simplePolicy(2, 10*time.Millisecond), nil)
	p.cfg.Delivery.MaxInFlight = 1
	p.cfg.DrainTimeout = dt.PD(50 * time.Millisecond)
	src := p.cfg.Topics.Source
	held, release := holdWrite(t, p, p.cfg.Topics.DeadLetter)
	var cur, peak atomic.Int32
	h := dispatcher.HandlerFunc(func(_ context.Context, d *dispatcher.Delivery) dispatcher.Result {
		if string(d.Record.Value) == "dead" {
			return dispatcher.Result{Undeliverable: true}
		}
		n := cur.Add(1)
		for {
			if m := peak.Load(); n <= m || peak.CompareAndSwap(m, n) {
				break
			}
		}
		defer cur.Add(-1)
		return dispatcher.Result{Success: true}
	})
	reg := prometheus.NewRegistry()
	r := start(t, dispatcher.Options{Config: p.cfg, Handler: h, Registerer: reg})
	prod := dt.Client(t, p.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))

	dt.Produce(t, prod, &kgo.Record{Topic: src, Partition: 0, Value: []byte("dead")})
	<-held
	r.e.RevokePartitions(map[string][]int32{src: {0}})
	release()
	const n = 40
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: src, Partition: 1, Value: []byte("ok")}
	}
	dt.Produce(t, prod, recs...)
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, src, 1) == n }, "partition 1 delivered and committed")
	dt.Eventually(t, 20*time.Second, func() bool {
		return counterValue(t, reg, metrics.RecordsTotal, metrics.LabelOutcome, metrics.OutcomeDeadLettered) == 1
	}, "the late acknowledgement settled")
	if c := p.committed(t, src, 0); c > 0 {
		t.Errorf("the revoked partition committed to %d by a settle after its revocation", c)
	}
	if v := dt.Gauge(reg, metrics.InFlight); v != 0 {
		t.Errorf("in flight %v once everything settled, want 0", v)
	}
	if m := peak.Load(); m > 1 {
		t.Errorf("%d deliveries at once with maxInFlight 1: a slot was released twice", m)
	}
}
