package dispatcher_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// docSink is an HTTP sink of batch documents that notes each request's body size and records,
// answering success for all but the records fail names on their first attempt (503).
type docSink struct {
	fail  map[string]bool
	mu    sync.Mutex
	sizes []int
	recs  []batch.Record
}

func (s *docSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := batch.ParseRequest(r, 64<<20)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.sizes = append(s.sizes, int(r.ContentLength))
	s.recs = append(s.recs, req.Records...)
	s.mu.Unlock()
	res := make([]batch.Result, len(req.Records))
	for i, rec := range req.Records {
		res[i] = batch.Success(rec.ID)
		if s.fail[string(rec.Value())] && rec.Attempt == 1 {
			res[i] = batch.Failure(rec.ID, 503, "Busy", "")
		}
	}
	_ = batch.WriteResults(w, res)
}

func (s *docSink) snapshot() ([]int, []batch.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...), append([]batch.Record(nil), s.recs...)
}

// startDocSink runs p's engine with the HTTP sink as its BatchHandler, POSTing to s.
func startDocSink(t *testing.T, p *pipeline, s *docSink, fc *clocktesting.FakeClock) {
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	sink := dispatcher.NewHTTPSink(srv.URL, 4, dispatcher.WithSinkClock(fc))
	start(t, dispatcher.Options{Config: p.cfg, Handler: sink, BatchHandler: sink, Clock: fc, Registerer: prometheus.NewRegistry()})
}

// TestBatchMaxBytesBoundsTheBody: maxBytes bounds the body the HTTP sink sends, not the records'
// raw bytes. Each value is 100 bytes of '<', which JSON writes as 600; counted raw, all ten
// records (about 1 KB) would go in one request of over 6 KB.
func TestBatchMaxBytesBoundsTheBody(t *testing.T) {
	const maxBytes, wait = 2000, 10 * time.Second
	p := newPipeline(t, "batchbytes", 1, simplePolicy(2, time.Second), nil)
	batchConfig(p, 100, maxBytes, wait)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	s := &docSink{}
	startDocSink(t, p, s, fc)

	var rs []*kgo.Record
	for i := range 10 {
		rs = append(rs, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i)), Value: []byte(strings.Repeat("<", 100))})
	}
	dt.Produce(t, p.prod, rs...)
	dt.Eventually(t, 20*time.Second, func() bool {
		fc.Step(wait) // the last batch does not fill
		return p.committed(t, p.cfg.Topics.Source, 0) == 10
	}, "the ten records delivered")
	sizes, recs := s.snapshot()
	if len(recs) != 10 {
		t.Errorf("the sink read %d records, want 10", len(recs))
	}
	for _, n := range sizes {
		if n <= 0 || n > maxBytes {
			t.Errorf("a request of %d bytes, want at most maxBytes %d (all: %v)", n, maxBytes, sizes)
		}
	}
	if len(sizes) < 4 {
		t.Errorf("%d requests %v, want the records spread over at least 4 to stay under %d bytes", len(sizes), sizes, maxBytes)
	}
}

// TestBatchDeliveredFrom: a batch record's deliveredFrom is what a single delivery's
// Retryops-Delivered-From header says: the record itself on a first attempt, its retry tier's
// record on a retry.
func TestBatchDeliveredFrom(t *testing.T) {
	p := newPipeline(t, "batchfrom", 1, simplePolicy(2, time.Second), nil)
	batchConfig(p, 2, 1<<20, 10*time.Second)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	s := &docSink{fail: map[string]bool{"retried": true}}
	startDocSink(t, p, s, fc)

	dt.Produce(t, p.prod, sourceRecords(p, "ok", "retried")...)
	dt.Eventually(t, 20*time.Second, func() bool {
		fc.Step(time.Second) // the retry's delay, then its batch's maxWait
		_, recs := s.snapshot()
		return len(recs) == 3
	}, "the two records and the retry delivered")
	_, recs := s.snapshot()
	src, tier := p.cfg.Topics.Source, p.cfg.Topics.Retries[0].Name
	want := []string{src + "/0/0", src + "/0/1", tier + "/0/0"}
	for i, r := range recs {
		if r.DeliveredFrom != want[i] {
			t.Errorf("record %d (%s, attempt %d): deliveredFrom %q, want %q", i, r.Value(), r.Attempt, r.DeliveredFrom, want[i])
		}
	}
}

// TestBatchDeadlinePassedWhileWaiting: a record past the policy's deadline when its batch is sent
// (it was not when it joined the batch being filled) is dead-lettered deadline_exceeded without
// being sent, as a record found past its deadline at start is; the others of the batch are sent.
func TestBatchDeadlinePassedWhileWaiting(t *testing.T) {
	const wait = 10 * time.Second
	pol := simplePolicy(2, time.Second)
	pol.Deadline = dt.PD(6 * time.Second)
	p := newPipeline(t, "batchdeadline", 1, pol, nil)
	batchConfig(p, 100, 1<<20, wait)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, nil)
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: reg})
	t0 := fc.Now()

	// late's deadline falls at t0+5s, inside the batch's wait; soon's at t0+11s, after it.
	late := &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("late"), Timestamp: t0.Add(-time.Second)}
	soon := &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("soon"), Timestamp: t0.Add(5 * time.Second)}
	dt.Produce(t, p.prod, late, soon)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.InFlight) == 2 }, "both records waiting in the batch")
	fc.SetTime(t0.Add(wait))
	if sb := received(t, h.calls, "the batch at maxWait"); strings.Join(sb.values, ",") != "soon" {
		t.Errorf("batch %v, want only soon", sb.values)
	}
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if reason, _ := dt.Header(dl[0], headers.Reason); string(dl[0].Value) != "late" || reason != string(retry.ReasonDeadlineExceeded) {
		t.Errorf("dead letter %q reason %q, want late, %s", dl[0].Value, reason, retry.ReasonDeadlineExceeded)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 2 }, "both committed")
}

// TestBatchRevokedWhileWaiting: the records of a partition revoked while they wait in the batch
// being filled are not sent: the revocation abandons them (its next owner delivers them), commits
// nothing of them and does not wait for a delivery.
func TestBatchRevokedWhileWaiting(t *testing.T) {
	p := newPipeline(t, "batchrevoke", 1, simplePolicy(2, time.Second), nil)
	batchConfig(p, 100, 1<<20, 10*time.Second) // the fake clock never reaches maxWait
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h := newBatchHandler(fc, nil)
	reg := prometheus.NewRegistry()
	r := start(t, dispatcher.Options{Config: p.cfg, Handler: h, BatchHandler: h, Clock: fc, Registerer: reg})

	dt.Produce(t, p.prod, sourceRecords(p, "a", "b")...)
	dt.Eventually(t, 20*time.Second, func() bool { return dt.Gauge(reg, metrics.InFlight) == 2 }, "both records waiting in the batch")
	r.e.RevokePartitions(map[string][]int32{p.cfg.Topics.Source: {0}})
	select {
	case sb := <-h.calls:
		t.Errorf("batch %v sent for a revoked partition", sb.values)
	default:
	}
	if got := dt.Gauge(reg, metrics.InFlight); got != 0 {
		t.Errorf("in flight %v after the revocation, want 0", got)
	}
	if got := p.committed(t, p.cfg.Topics.Source, 0); got > 0 {
		t.Errorf("committed %d, want nothing of the abandoned records", got)
	}
}
