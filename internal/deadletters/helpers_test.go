package deadletters_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/internal/kafka/franz"
	"github.com/retryops/retry-operator/sdk/headers"
)

const (
	dlqTopic    = "orders.dlq"
	tierTopic   = "orders.retry.1"
	ordersPipe  = "shop/orders"
	partitions  = 3
	testTimeout = 60 * time.Second
)

// env is a kfake cluster with a dead letter topic, its state topic and a retry tier, reached
// through the real franz factory wrapped to count what is produced.
type env struct {
	t     *testing.T
	conn  kafka.Connection
	f     *franz.Factory
	kafka *counting
	admin kafka.Admin
}

func newEnv(t *testing.T) *env {
	t.Helper()
	state, _ := deadletters.StateTopic(dlqTopic)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, dlqTopic, state, tierTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &env{t: t, conn: kafka.Connection{BootstrapServers: c.ListenAddrs(), ClientID: "test"}}
	e.f = franz.NewFactory(franz.WithRequestTimeout(20 * time.Second))
	t.Cleanup(e.f.Close)
	e.kafka = &counting{ClientFactory: e.f, produced: map[string]int{}}
	if e.admin, err = e.f.Admin(context.Background(), e.conn); err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// counting wraps a ClientFactory: it counts the records produced per topic, notes the clock's time
// of every produce to the retry tier, and can fail the next state writes.
type counting struct {
	kafka.ClientFactory
	clk clock.PassiveClock

	mu          sync.Mutex
	produced    map[string]int
	tierAt      []time.Time // clock time of each produce call to the tier
	tierSizes   []int
	failStates  int // fail this many state writes (after nothing was written)
	produceHook func(topic string)
}

func (c *counting) ProduceRecords(ctx context.Context, conn kafka.Connection, topic string, recs []kafka.ProduceRecord) ([]kafka.ProduceResult, error) {
	c.mu.Lock()
	state, _ := deadletters.StateTopic(dlqTopic)
	if topic == state && c.failStates > 0 {
		c.failStates--
		c.mu.Unlock()
		return nil, fmt.Errorf("injected state write failure")
	}
	if topic == tierTopic && c.clk != nil {
		c.tierAt = append(c.tierAt, c.clk.Now())
		c.tierSizes = append(c.tierSizes, len(recs))
	}
	hook := c.produceHook
	c.mu.Unlock()
	if hook != nil {
		hook(topic)
	}
	res, err := c.ClientFactory.ProduceRecords(ctx, conn, topic, recs)
	c.mu.Lock()
	for _, r := range res {
		if r.Err == nil {
			c.produced[topic]++
		}
	}
	c.mu.Unlock()
	return res, err
}

func (c *counting) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.produced[topic]
}

// dl describes one dead letter to seed.
type dl struct {
	partition int32
	reason    string
	errType   string
	pipeline  string
	at        time.Time
}

var seedBase = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// seed writes dead letters as the dispatcher would, the i-th with key "k<i>", value "v<i>", a user
// header tenant=eu and the context headers; it returns their IDs in order.
func (e *env) seed(dls []dl) []deadletters.ID {
	e.t.Helper()
	recs := make([]kafka.ProduceRecord, len(dls))
	for i, d := range dls {
		ts := d.at
		if ts.IsZero() {
			ts = seedBase.Add(time.Duration(i) * time.Millisecond)
		}
		hs := []kafka.Header{
			{Key: "tenant", Value: []byte("eu")},
			{Key: headers.OriginalTopic, Value: []byte("orders")},
			{Key: headers.OriginalPartition, Value: []byte("1")},
			{Key: headers.OriginalOffset, Value: []byte(strconv.Itoa(1000 + i))},
			{Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(ts.Add(-time.Minute)))},
			{Key: headers.Attempts, Value: []byte("4")},
			{Key: headers.FirstFailure, Value: []byte(headers.FormatTime(ts.Add(-50 * time.Second)))},
			{Key: headers.LastFailure, Value: []byte(headers.FormatTime(ts))},
			{Key: headers.ErrorType, Value: []byte(d.errType)},
			{Key: headers.ErrorMessage, Value: []byte("boom " + strconv.Itoa(i))},
			{Key: headers.HTTPStatus, Value: []byte("503")},
			{Key: headers.Reason, Value: []byte(d.reason)},
			{Key: headers.ConsumerGroup, Value: []byte("orders")},
			{Key: headers.Pipeline, Value: []byte(d.pipeline)},
		}
		recs[i] = kafka.ProduceRecord{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v" + strconv.Itoa(i)), Headers: hs, Partition: d.partition, Timestamp: ts}
	}
	var ids []deadletters.ID
	for len(recs) > 0 {
		n := min(len(recs), 500)
		res, err := e.f.ProduceRecords(ctxT(e.t), e.conn, dlqTopic, recs[:n])
		if err != nil {
			e.t.Fatalf("seed: %v", err)
		}
		for _, r := range res {
			ids = append(ids, deadletters.ID{Partition: r.Partition, Offset: r.Offset})
		}
		recs = recs[n:]
	}
	return ids
}

// snapshot lists the dead letter topic's end offsets.
func (e *env) snapshot() map[int32]int64 {
	e.t.Helper()
	out, err := deadletters.Snapshot(ctxT(e.t), e.admin, dlqTopic)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// starts lists the dead letter topic's start offsets.
func (e *env) starts() map[int32]int64 {
	e.t.Helper()
	offs, err := e.admin.ListOffsets(ctxT(e.t), dlqTopic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[int32]int64{}
	for _, p := range offs[dlqTopic] {
		out[p.Partition] = p.Start
	}
	return out
}

// readAll scans a whole topic with copies of every record.
func (e *env) readAll(topic string) []kafka.Record {
	e.t.Helper()
	offs, err := e.admin.ListOffsets(ctxT(e.t), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	ranges := map[int32]kafka.OffsetRange{}
	for _, p := range offs[topic] {
		ranges[p.Partition] = kafka.OffsetRange{From: p.Start, To: p.End}
	}
	var out []kafka.Record
	err = e.f.Scan(ctxT(e.t), e.conn, map[string]map[int32]kafka.OffsetRange{topic: ranges}, func(r kafka.Record) {
		r.Key, r.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
		hs := make([]kafka.Header, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = kafka.Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
		r.Headers = hs
		out = append(out, r)
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// states loads the record of decisions.
func (e *env) states() *deadletters.States {
	e.t.Helper()
	id, err := deadletters.TopicID(ctxT(e.t), e.admin, dlqTopic)
	if err != nil {
		e.t.Fatal(err)
	}
	s, err := deadletters.LoadStates(ctxT(e.t), e.admin, e.f, e.conn, dlqTopic, id, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// toOrdersTier is the Target of the tests: pipeline shop/orders replays to its tier; any other has
// no target.
func (e *env) toOrdersTier(_ context.Context, en *deadletters.Entry) (deadletters.Target, error) {
	if en.Pipeline == ordersPipe {
		return deadletters.Target{Topic: tierTopic, Conn: e.conn, Pipeline: ordersPipe}, nil
	}
	return deadletters.Target{}, fmt.Errorf("%w: pipeline %q", deadletters.ErrNoTarget, en.Pipeline)
}

// testLedger is the topic ledger of the tests: queue shop/orders-dlq holds dlqTopic and its record of
// decisions, bank/payments-dlq holds payments.dlq and its; pipeline shop/orders its source topic
// orders and its tier tierTopic, pipeline shop/billing its tier billing.retry.1, pipeline shop/audit
// the source topic orders too and its tier audit.retry.1; the tier shared.retry.1 of pipeline
// shop/shared is also queue shop/squatter's.
func testLedger(_ context.Context, topic string) ([]deadletters.Holder, error) {
	state, _ := deadletters.StateTopic(dlqTopic)
	all := []deadletters.Holder{
		{Kind: "DeadLetterQueue", Namespace: "shop", Name: "orders-dlq", Topics: []string{dlqTopic, state}},
		{Kind: "DeadLetterQueue", Namespace: "bank", Name: "payments-dlq", Topics: []string{"payments.dlq", "payments.dlq.state"}},
		{Kind: "ConsumerPipeline", Namespace: "shop", Name: "orders", Topics: []string{"orders", tierTopic}},
		{Kind: "ConsumerPipeline", Namespace: "shop", Name: "billing", Topics: []string{"billing", "billing.retry.1"}},
		{Kind: "ConsumerPipeline", Namespace: "shop", Name: "audit", Topics: []string{"orders", "audit.retry.1"}},
		{Kind: "ConsumerPipeline", Namespace: "shop", Name: "shared", Topics: []string{"shared", "shared.retry.1"}},
		{Kind: "DeadLetterQueue", Namespace: "shop", Name: "squatter", Topics: []string{"shared.retry.1"}},
	}
	var out []deadletters.Holder
	for _, h := range all {
		if slices.Contains(h.Topics, topic) {
			out = append(out, h)
		}
	}
	return out, nil
}

func header(r kafka.Record, name string) (string, bool) {
	for i := len(r.Headers) - 1; i >= 0; i-- {
		if r.Headers[i].Key == name {
			return string(r.Headers[i].Value), true
		}
	}
	return "", false
}

// virtualClock is a clock.Clock whose timers fire at once, moving its time to their deadline: a run
// paced by it takes no real time, and the times it reads are the schedule the limiter computed.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newVirtualClock() *virtualClock { return &virtualClock{now: seedBase.Add(time.Hour)} }

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}
func (c *virtualClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *virtualClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.now = c.now.Add(d)
	}
	return c.now
}
func (c *virtualClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.advance(d)
	return ch
}
func (c *virtualClock) NewTimer(d time.Duration) clock.Timer {
	return &firedTimer{c: c.After(d)}
}
func (c *virtualClock) Sleep(d time.Duration)                 { c.advance(d) }
func (c *virtualClock) Tick(d time.Duration) <-chan time.Time { return c.After(d) }

type firedTimer struct{ c <-chan time.Time }

func (t *firedTimer) C() <-chan time.Time      { return t.c }
func (t *firedTimer) Stop() bool               { return false }
func (t *firedTimer) Reset(time.Duration) bool { return false }
