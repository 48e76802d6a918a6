// Package dispatchertest holds test helpers for the data plane: an in-process Kafka (kfake), an
// HTTP sink that fails on command and records every delivery, and readers for the topics the
// dispatcher writes. It is imported by tests only.
package dispatchertest

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
)

// Cluster starts an in-process Kafka with the given topics (name -> partitions) and closes it at
// the end of the test.
func Cluster(t testing.TB, topics map[string]int32, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	all := []kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(100 * time.Millisecond)}
	for name, p := range topics {
		all = append(all, kfake.SeedTopics(p, name))
	}
	all = append(all, opts...)
	c, err := kfake.NewCluster(all...)
	if err != nil {
		t.Fatalf("starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// Client returns a plain franz-go client for the cluster, closed at the end of the test.
func Client(t testing.TB, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Produce writes records synchronously.
func Produce(t testing.TB, cl *kgo.Client, rs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// ReadTopic reads a topic from the start until it returned at least n records or the timeout
// elapsed, and returns what it read.
func ReadTopic(t testing.TB, c *kfake.Cluster, topic string, n int, timeout time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

// Header returns the value of a record header, and whether it is present.
func Header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Gauge returns the value of the gauge or counter name in g (its first series), or -1 when g has
// none.
func Gauge(g prometheus.Gatherer, name string) float64 {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// Eventually waits until cond holds, checking every few milliseconds (gomega's Eventually), and
// fails the test with the message after timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	gomega.NewWithT(t).Eventually(cond).WithTimeout(timeout).WithPolling(5*time.Millisecond).
		Should(gomega.BeTrue(), append([]any{format}, args...)...)
}

// Request is one request the sink received.
type Request struct {
	Key           string // Idempotency-Key
	Attempt       int
	At            time.Time // when it arrived, on the sink's clock
	DeliveredFrom string
	Header        http.Header
	Body          []byte
	Status        int // what the sink answered
}

// Response is what the sink answers.
type Response struct {
	Status     int           // 0 means 200
	RetryAfter string        // Retry-After header
	ErrorType  string        // Retryops-Error-Type header
	Body       string        // response body
	Delay      time.Duration // wait before answering (bounded by the request's context)
}

// Sink is an HTTP sink that answers per Behavior and records every request.
type Sink struct {
	*httptest.Server

	clock clock.PassiveClock

	mu       sync.Mutex
	behavior func(*Request) Response
	reqs     []*Request
	byKey    map[string][]*Request
	cur, max int
	curFrom  map[string]int // concurrent requests per delivered-from topic/partition
	maxFrom  int
	maxPer   map[string]int // the most concurrent requests seen per delivered-from topic/partition
}

// SinkOption configures a Sink.
type SinkOption func(*Sink)

// WithClock stamps requests (Request.At) with c's time instead of the real clock's: the engine's
// fake clock, for tests that step time.
func WithClock(c clock.PassiveClock) SinkOption { return func(s *Sink) { s.clock = c } }

// NewSink starts a sink; a nil behavior answers 200 to everything.
func NewSink(t testing.TB, behavior func(*Request) Response, opts ...SinkOption) *Sink {
	s := &Sink{clock: clock.RealClock{}, behavior: behavior, byKey: map[string][]*Request{}, curFrom: map[string]int{}, maxPer: map[string]int{}}
	for _, o := range opts {
		o(s)
	}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// partOf maps "<topic>/<partition>/<offset>" to "<topic>/<partition>".
func partOf(deliveredFrom string) string {
	if i := strings.LastIndexByte(deliveredFrom, '/'); i >= 0 {
		return deliveredFrom[:i]
	}
	return deliveredFrom
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	attempt, _ := strconv.Atoi(r.Header.Get(headers.HTTPRetryAttempt))
	req := &Request{Key: r.Header.Get(headers.HTTPIdempotencyKey), Attempt: attempt, At: s.clock.Now(),
		DeliveredFrom: r.Header.Get(headers.HTTPDeliveredFrom), Header: r.Header.Clone(), Body: body}
	part := partOf(req.DeliveredFrom)
	s.mu.Lock()
	s.cur++
	s.max = max(s.max, s.cur)
	s.curFrom[part]++
	s.maxFrom = max(s.maxFrom, s.curFrom[part])
	s.maxPer[part] = max(s.maxPer[part], s.curFrom[part])
	b := s.behavior
	s.mu.Unlock()

	resp := Response{}
	if b != nil {
		resp = b(req)
	}
	if resp.Delay > 0 {
		select {
		case <-time.After(resp.Delay):
		case <-r.Context().Done():
		}
	}
	if resp.Status == 0 {
		resp.Status = http.StatusOK
	}
	if r.Context().Err() != nil {
		resp.Status = 499 // the client went away: nobody saw an answer
	}
	req.Status = resp.Status
	s.mu.Lock()
	s.cur--
	s.curFrom[part]--
	s.reqs = append(s.reqs, req)
	s.byKey[req.Key] = append(s.byKey[req.Key], req)
	s.mu.Unlock()
	if resp.RetryAfter != "" {
		w.Header().Set(headers.HTTPRetryAfter, resp.RetryAfter)
	}
	if resp.ErrorType != "" {
		w.Header().Set(headers.HTTPErrorType, resp.ErrorType)
	}
	w.WriteHeader(resp.Status)
	_, _ = io.WriteString(w, resp.Body)
}

// Requests returns a copy of every request so far, in the order they were answered.
func (s *Sink) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.reqs...)
}

// ByKey returns the requests for one idempotency key, in order.
func (s *Sink) ByKey(key string) []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Request(nil), s.byKey[key]...)
}

// Count returns the number of requests so far.
func (s *Sink) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

// Succeeded returns how many distinct keys got a 2xx answer, and how many 2xx answers there were.
func (s *Sink) Succeeded() (keys, answers int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range s.byKey {
		ok := 0
		for _, r := range rs {
			if r.Status/100 == 2 {
				ok++
			}
		}
		if ok > 0 {
			keys++
		}
		answers += ok
	}
	return keys, answers
}

// SuccessCounts returns, per key, the number of 2xx answers.
func (s *Sink) SuccessCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, rs := range s.byKey {
		for _, r := range rs {
			if r.Status/100 == 2 {
				out[k]++
			}
		}
	}
	return out
}

// InFlight returns the number of requests being answered now.
func (s *Sink) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// MaxConcurrent returns the largest number of requests answered at once, overall and per consumed
// partition.
func (s *Sink) MaxConcurrent() (overall, perPartition int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.maxFrom
}

// MaxConcurrentPer returns the most concurrent requests seen for each delivered-from
// topic/partition.
func (s *Sink) MaxConcurrentPer() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.maxPer)
}

// WaitFor waits until cond (called with the sink's requests) holds.
func (s *Sink) WaitFor(t testing.TB, timeout time.Duration, cond func(reqs []*Request) bool, format string, args ...any) {
	t.Helper()
	Eventually(t, timeout, func() bool { return cond(s.Requests()) }, format, args...)
}

// Keys returns the distinct keys of the requests, sorted.
func Keys(reqs []*Request) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		if !seen[r.Key] {
			seen[r.Key] = true
			out = append(out, r.Key)
		}
	}
	sort.Strings(out)
	return out
}

// Config returns a dispatcher configuration for a pipeline on the brokers addrs: source topic src,
// tiers built from the policy (ByAttempt), dead letter topic dlq, the sink (when sinkURL is not
// ""), short group timeouts, and the HTTP endpoints disabled.
func Config(addrs []string, group, src, dlq string, pol *policy.Spec, sinkURL string) *config.Config {
	cfg := &config.Config{
		Pipeline:      config.Pipeline{Namespace: "test", Name: group},
		ConsumerGroup: group,
		Group: config.GroupSettings{
			SessionTimeout:    &policy.Duration{Duration: 3 * time.Second},
			HeartbeatInterval: &policy.Duration{Duration: 300 * time.Millisecond},
			RebalanceTimeout:  &policy.Duration{Duration: 10 * time.Second},
		},
		Kafka:        config.Kafka{BootstrapServers: addrs},
		Topics:       config.Topics{Source: src, DeadLetter: dlq},
		Policy:       pol,
		DrainTimeout: &policy.Duration{Duration: 5 * time.Second},
		Listen:       config.Listen{MetricsAddress: config.Disabled, HealthAddress: config.Disabled},
	}
	if sinkURL != "" {
		cfg.Sink = &config.Sink{URL: sinkURL}
	}
	cfg.Default()
	return cfg
}

// TierTopics returns the retry-tier topic names of cfg.
func TierTopics(cfg *config.Config) []string { return cfg.Topics.Retries.Names() }

// D is a policy.Duration.
func D(d time.Duration) policy.Duration { return policy.Duration{Duration: d} }

// PD is a *policy.Duration.
func PD(d time.Duration) *policy.Duration { return &policy.Duration{Duration: d} }
