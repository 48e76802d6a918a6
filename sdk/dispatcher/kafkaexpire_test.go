package dispatcher_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/retry"
)

// loopCounter counts the poll loop's rounds (its hook runs after the round's expiry check).
type loopCounter struct{ n atomic.Int64 }

// step moves the clock by d and waits for a whole round of the poll loop after it: the round under
// way when the clock moved may have checked expiry before.
func (c *loopCounter) step(g *gomega.WithT, fc *clocktesting.FakeClock, d time.Duration) {
	from := c.n.Load()
	fc.Step(d)
	g.Eventually(c.n.Load).WithTimeout(20*time.Second).Should(gomega.BeNumerically(">=", from+2), "a round of the poll loop after the step")
}

// startCounted starts an engine whose poll loop rounds are counted.
func startCounted(t *testing.T, o dispatcher.Options) (*running, *loopCounter) {
	t.Helper()
	if err := o.Config.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	e, err := dispatcher.New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var lc loopCounter
	e.SetPollHook(func() { lc.n.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{e: e, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- e.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r, &lc
}

// TestFetchAndWriteProblemsExpireAfterTheTTL: a write refused by a retry tier's ACLs (the record is
// dead-lettered instead, and nothing writes to the tier again) and a fetch refused on that tier are
// kept while unseen for less than KafkaProblemTTL on the engine's clock, each cleared once unseen
// for KafkaProblemTTL without any success. A broker's problem does not expire: only a connection
// clears it.
func TestFetchAndWriteProblemsExpireAfterTheTTL(t *testing.T) {
	g := gomega.NewWithT(t)
	p := newPipeline(t, "expire", 1, simplePolicy(2, time.Hour), nil)
	tier := dt.TierTopics(p.cfg)[0]
	tierID := topicID(t, p, tier)
	p.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		for _, rt := range pr.Topics {
			if rt.Topic == tier || rt.TopicID == tierID {
				return rejectProduce(pr, kerr.TopicAuthorizationFailed), nil, true
			}
		}
		return nil, nil, false
	})
	t0 := time.Now().Truncate(time.Millisecond)
	fc := clocktesting.NewFakeClock(t0)
	h := dispatcher.HandlerFunc(func(context.Context, *dispatcher.Delivery) dispatcher.Result {
		return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503}}
	})
	var seen problems
	r, loop := startCounted(t, dispatcher.Options{Config: p.cfg, Handler: h, Clock: fc, OnKafkaProblem: seen.observe})
	g.Eventually(r.e.Ready).WithTimeout(20 * time.Second).Should(gomega.BeTrue())

	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("x")})
	g.Eventually(r.e.KafkaPlaces).WithTimeout(20*time.Second).Should(gomega.Equal([]string{"produce " + tier}), "the refused write to the tier kept")
	dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second) // the record went on: nothing writes to the tier again
	g.Expect(seen.current()).To(gomega.And(gomega.HaveField("Reason", circuitstate.KafkaAuthorization), gomega.HaveField("Since", t0)))

	loop.step(g, fc, time.Minute)
	r.e.FetchError(tier, 0, fmt.Errorf("fetching: %w", kerr.TopicAuthorizationFailed))
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + tier, "produce " + tier}))

	loop.step(g, fc, dispatcher.KafkaProblemTTL-time.Minute-time.Millisecond)
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + tier, "produce " + tier}), "both kept a millisecond before the write's TTL")
	loop.step(g, fc, time.Millisecond)
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + tier}), "the write's problem cleared at its TTL")
	g.Expect(seen.current()).To(gomega.HaveField("Since", t0.Add(time.Minute)), "the fetch's problem reported")
	g.Expect(r.e.Ready()).To(gomega.BeFalse())

	loop.step(g, fc, time.Minute-time.Millisecond)
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"fetch " + tier}), "kept a millisecond before the fetch's TTL")
	loop.step(g, fc, time.Millisecond)
	g.Expect(r.e.KafkaPlaces()).To(gomega.BeEmpty(), "the fetch's problem cleared at its TTL")
	g.Expect(seen.current()).To(gomega.BeNil())
	g.Expect(r.e.Ready()).To(gomega.BeTrue())

	r.e.BrokerConnect("", 1, fmt.Errorf("dial: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}))
	loop.step(g, fc, 10*dispatcher.KafkaProblemTTL)
	g.Expect(r.e.KafkaPlaces()).To(gomega.Equal([]string{"broker 1"}), "a broker's problem does not expire")
	r.e.BrokerConnect("", 1, nil)
	g.Expect(r.e.KafkaPlaces()).To(gomega.BeEmpty(), "a connection to the broker clears it")
}
