package dispatcher_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// sentBatch is one DeliverBatch call: the deliveries' values and attempts, and the clock's time.
type sentBatch struct {
	values   []string
	attempts []int32
	parts    []string // consumed topic/partition
	offsets  []int64  // consumed offsets
	at       time.Time
}

// batchHandler answers each delivery with answer's Result (nil: success), leaving out the results
// of the records answer says to omit (they must be last), and reports every call on the channel.
// Each call blocks until release returns (nil: at once).
type batchHandler struct {
	clock   *clocktesting.FakeClock
	answer  func(d *dispatcher.Delivery) (dispatcher.Result, bool)
	release func()
	calls   chan sentBatch

	mu              sync.Mutex
	inFlight        map[string]int // batches in flight per source partition
	maxInFlightPart int
}

func newBatchHandler(fc *clocktesting.FakeClock, answer func(d *dispatcher.Delivery) (dispatcher.Result, bool)) *batchHandler {
	return &batchHandler{clock: fc, answer: answer, calls: make(chan sentBatch, 64), inFlight: map[string]int{}}
}

func (h *batchHandler) Deliver(context.Context, *dispatcher.Delivery) dispatcher.Result {
	panic("a batch pipeline delivered a record alone")
}

func (h *batchHandler) DeliverBatch(_ context.Context, ds []*dispatcher.Delivery) []dispatcher.Result {
	sb := sentBatch{at: h.clock.Now()}
	seen := map[string]bool{}
	h.mu.Lock()
	for _, d := range ds {
		sb.values = append(sb.values, string(d.Record.Value))
		sb.attempts = append(sb.attempts, d.Attempt)
		p := d.Consumed.Topic + "/" + strconv.Itoa(int(d.Consumed.Partition))
		sb.parts = append(sb.parts, p)
		sb.offsets = append(sb.offsets, d.Consumed.Offset)
		if !seen[p] && !strings.Contains(p, ".retry.") { // a retry tier is never ordered
			seen[p] = true
			h.inFlight[p]++
			h.maxInFlightPart = max(h.maxInFlightPart, h.inFlight[p])
		}
	}
	h.mu.Unlock()
	h.calls <- sb
	if h.release != nil {
		h.release()
	}
	var res []dispatcher.Result
	for _, d := range ds {
		r, keep := dispatcher.Result{Success: true}, true
		if h.answer != nil {
			r, keep = h.answer(d)
		}
		if keep {
			res = append(res, r)
		}
	}
	h.mu.Lock()
	for p := range seen {
		h.inFlight[p]--
	}
	h.mu.Unlock()
	return res
}

func batchConfig(p *pipeline, maxRecords int32, maxBytes int64, maxWait time.Duration) {
	p.cfg.CommitInterval = dt.PD(0) // the fake clock moves only for maxWait
	p.cfg.Delivery.Batch = &config.Batch{MaxRecords: maxRecords, MaxBytes: maxBytes, MaxWait: dt.PD(maxWait)}
}

func sourceRecords(p *pipeline, values ...string) []*kgo.Record {
	rs := make([]*kgo.Record, len(values))
	for i, v := range values {
		rs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(v), Value: []byte(v)}
	}
	return rs
}

// TestBatchMixedFates: the records of one batch each get the fate they would get alone: a success
// is committed, a 503 goes to its retry tier due one backoff delay after the batch's answer, a 400
// is dead-lettered non_retriable_error, and a record the handler returned no result for fails as
// BatchResultMissing, classified as a 502 (retried), never a success. The source offsets are
// committed once the tier and dead-letter records are written.
func TestBatchMixedFates(t *testing.T) {
	const delay = time.Hour
	p := newPipeline(t, "batchfates", 1, simplePolicy(3, delay), nil)
	batchConfig(p, 4, 1<<20, 10*time.Second) // sent when full: the fake clock never reaches maxWait
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, func(d *dispatcher.Delivery) (dispatcher.Result, bool) {
		switch string(d.Record.Value) {
		case "transient":
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 503, ErrorType: "Throttled"}}, true
		case "bad":
			return dispatcher.Result{Outcome: retry.Outcome{HTTPStatus: 400, ErrorType: "Invalid"}}, true
		case "missing":
			return dispatcher.Result{}, false
		}
		return dispatcher.Result{Success: true}, true
	})
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: reg})

	dt.Produce(t, p.prod, sourceRecords(p, "ok", "transient", "bad", "missing")...)
	sb := received(t, h.calls, "the batch")
	if strings.Join(sb.values, ",") != "ok,transient,bad,missing" {
		t.Fatalf("batch %v, want the four records in offset order", sb.values)
	}

	tier := dt.ReadTopic(t, p.c, p.cfg.Topics.Retries[0].Name, 2, 20*time.Second)
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(tier) != 2 || len(dl) != 1 {
		t.Fatalf("%d retry records and %d dead letters, want 2 and 1", len(tier), len(dl))
	}
	wantType := map[string]string{"transient": "Throttled", "missing": batch.ErrorTypeResultMissing}
	wantStatus := map[string]string{"transient": "503", "missing": "502"}
	for _, r := range tier {
		v := string(r.Value)
		et, _ := dt.Header(r, headers.ErrorType)
		st, _ := dt.Header(r, headers.HTTPStatus)
		if et != wantType[v] || st != wantStatus[v] {
			t.Errorf("retry of %q: error type %q, status %q; want %q, %q", v, et, st, wantType[v], wantStatus[v])
		}
		due, _ := dt.Header(r, headers.Due)
		if d, err := headers.ParseTime(due); err != nil || !d.Equal(sb.at.Add(delay)) {
			t.Errorf("retry of %q due %q, want the answer's time %v plus %v", v, due, sb.at, delay)
		}
	}
	if v := string(dl[0].Value); v != "bad" {
		t.Errorf("dead letter %q, want bad", v)
	}
	if reason, _ := dt.Header(dl[0], headers.Reason); reason != string(retry.ReasonNonRetriable) {
		t.Errorf("dead letter reason %q, want %s", reason, retry.ReasonNonRetriable)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 4 }, "the batch committed")
	if got := counterWith(t, reg, metrics.BatchesTotal, metrics.ResultPartial); got != 1 {
		t.Errorf("batches_total{result=partial} = %v, want 1", got)
	}
}

// TestBatchMaxWait: a batch that does not fill is sent maxWait after its first record, on the
// engine's clock, and not a millisecond before.
func TestBatchMaxWait(t *testing.T) {
	const wait = 10 * time.Second
	p := newPipeline(t, "batchwait", 1, simplePolicy(2, time.Second), nil)
	batchConfig(p, 100, 1<<20, wait)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, nil)
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: reg})
	t0 := fc.Now()

	dt.Produce(t, p.prod, sourceRecords(p, "a", "b", "c")...)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.InFlight) == 3 }, "three records waiting in the batch")
	fc.SetTime(t0.Add(wait - time.Millisecond))
	dt.Eventually(t, 20*time.Second, fc.HasWaiters, "the batch's timer still set")
	select {
	case sb := <-h.calls:
		t.Fatalf("batch %v sent at %v, before maxWait", sb.values, sb.at)
	default:
	}
	fc.SetTime(t0.Add(wait))
	sb := received(t, h.calls, "the batch at maxWait")
	if strings.Join(sb.values, ",") != "a,b,c" {
		t.Fatalf("batch %v, want a,b,c", sb.values)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 3 }, "the batch committed")
}

// TestBatchMaxRecordsAndBytes: a batch holds at most maxRecords records, and no more than maxBytes
// of keys, values and headers (a record that would take it past goes in the next batch).
func TestBatchMaxRecordsAndBytes(t *testing.T) {
	p := newPipeline(t, "batchbounds", 1, simplePolicy(2, time.Second), nil)
	batchConfig(p, 3, 10, 10*time.Second) // each record below is 2 or 4 bytes (key and value)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, nil)
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: reg})

	dt.Produce(t, p.prod, sourceRecords(p, "a", "b", "c", "dd", "ee", "ff", "g")...)
	// a,b,c: full at 3 records (6 bytes); dd,ee: 8 bytes, ff would make 12; ff,g: 6 bytes, sent
	// at maxWait.
	if got := strings.Join(received(t, h.calls, "the first batch").values, ","); got != "a,b,c" {
		t.Errorf("first batch %s, want a,b,c (maxRecords 3)", got)
	}
	if got := strings.Join(received(t, h.calls, "the second batch").values, ","); got != "dd,ee" {
		t.Errorf("second batch %s, want dd,ee (maxBytes 10)", got)
	}
	// Ordered: ff waits for dd,ee to finish before its batch starts filling.
	dt.Eventually(t, 20*time.Second, func() bool {
		return p.committed(t, p.cfg.Topics.Source, 0) == 5 && dt.Gauge(reg, metrics.InFlight) == 2
	}, "dd,ee finished, ff and g waiting in the batch")
	fc.Step(10 * time.Second)
	if got := strings.Join(received(t, h.calls, "the third batch").values, ","); got != "ff,g" {
		t.Errorf("third batch %s, want ff,g", got)
	}
}

// counterWith returns the counter name's series whose result label is result.
func counterWith(t *testing.T, g prometheus.Gatherer, name, result string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == metrics.LabelResult && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
