package retryloop_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/batch"
	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

// batchPolicy retries HTTP 5xx and TimeoutError up to three attempts in all, 50ms then 100ms
// apart, and dead-letters anything else.
func batchPolicy() *policy.Spec {
	return &policy.Spec{
		MaxAttempts: 3,
		Backoff:     policy.Backoff{InitialDelay: dt.D(50 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient-http", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"500-599"}},
			{Name: "timeouts", Action: policy.ActionRetry, ErrorTypes: []string{"TimeoutError"}},
		}},
	}
}

// batchCluster is a kfake cluster with a source of the given partitions, its two retry tiers and a
// dead letter topic, and the config of a pipeline on it delivering in batches of up to maxRecords.
func batchCluster(t *testing.T, group string, partitions, maxRecords int32) (*kfake.Cluster, *config.Config) {
	t.Helper()
	src, dlq := group+".src", group+".dlq"
	c := dt.Cluster(t, map[string]int32{src: partitions, src + ".retry.1": partitions, src + ".retry.2": partitions, dlq: 1})
	cfg := dt.Config(c.ListenAddrs(), group, src, dlq, batchPolicy(), "")
	cfg.Delivery.Batch = &config.Batch{MaxRecords: maxRecords, MaxWait: dt.PD(200 * time.Millisecond)}
	return c, cfg
}

// batchCall is one call of a batch handler: the values and delivery infos of its records.
type batchCall struct {
	values []string
	infos  []retryloop.DeliveryInfo
}

// recorder records the calls of a batch handler.
type recorder struct {
	mu    sync.Mutex
	calls []batchCall
}

func (r *recorder) record(ctx context.Context, recs []*kgo.Record) (int, error) {
	c := batchCall{}
	for i, rec := range recs {
		info, ok := retryloop.BatchInfo(ctx, i)
		if !ok {
			return 0, fmt.Errorf("no delivery info for record %d", i)
		}
		c.values = append(c.values, string(rec.Value))
		c.infos = append(c.infos, info)
	}
	if _, ok := retryloop.BatchInfo(ctx, len(recs)); ok {
		return 0, errors.New("delivery info past the batch")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return len(r.calls) - 1, nil
}

// deliveries returns, for value v, the index of each call that held it and its delivery info.
func (r *recorder) deliveries(v string) (calls []int, infos []retryloop.DeliveryInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range r.calls {
		for j, cv := range c.values {
			if cv == v {
				calls, infos = append(calls, i), append(infos, c.infos[j])
			}
		}
	}
	return calls, infos
}

func (r *recorder) call(i int) batchCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[i]
}

func runLoop(t *testing.T, loop *retryloop.Loop) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

// deadLetters reads n dead letters and returns "reason errorType attempts" by key.
func deadLetters(t *testing.T, c *kfake.Cluster, topic string, n int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, r := range dt.ReadTopic(t, c, topic, n, 20*time.Second) {
		reason, _ := dt.Header(r, headers.Reason)
		et, _ := dt.Header(r, headers.ErrorType)
		attempts, _ := dt.Header(r, headers.Attempts)
		out[string(r.Key)] = reason + " " + et + " " + attempts
	}
	return out
}

// TestBatchHandlerFates: each record of a batch gets the fate it would get alone. A success is
// delivered once; a transient failure is retried and delivered in a later batch with the same
// idempotency key; a permanent one is dead-lettered with its own reason and type; a record the
// handler returns no error for fails as BatchResultMissing (retried as a 502, then dead-lettered),
// never succeeds; entries past the records are ignored.
func TestBatchHandlerFates(t *testing.T) {
	g := NewWithT(t)
	c, cfg := batchCluster(t, "batchfates", 1, 100)
	rec := &recorder{}
	loop, err := retryloop.NewBatch(cfg, func(ctx context.Context, recs []*kgo.Record) []error {
		call, err := rec.record(ctx, recs)
		errs := make([]error, len(recs))
		if err != nil {
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		for i, r := range recs {
			info, _ := retryloop.BatchInfo(ctx, i)
			switch string(r.Value) {
			case "transient", "status":
				if info.Attempt == 1 {
					errs[i] = retryloop.HTTPStatus(503, fmt.Errorf("call %d: unavailable", call))
				}
			case "permanent":
				errs[i] = retryloop.Permanent(&ValidationError{Field: "sku"})
			case "typed":
				errs[i] = fmt.Errorf("inventory: %w", TimeoutError{})
			case "missing":
				return errs[:i] // this record and those after it have no entry
			}
		}
		return append(errs, errors.New("past the batch")) // ignored
	}, retryloop.WithoutHTTP())
	g.Expect(err).NotTo(HaveOccurred())
	runLoop(t, loop)

	prod := dt.Client(t, c)
	var recs []*kgo.Record
	for _, v := range []string{"ok", "transient", "permanent", "status", "typed", "ok2"} {
		recs = append(recs, &kgo.Record{Topic: cfg.Topics.Source, Key: []byte(v), Value: []byte(v)})
	}
	dt.Produce(t, prod, recs...)
	g.Expect(deadLetters(t, c, cfg.Topics.DeadLetter, 2)).To(Equal(map[string]string{
		"permanent": headers.ReasonNonRetriable + " ValidationError 1",
		"typed":     headers.ReasonMaxRetriesExceeded + " TimeoutError 3",
	}))
	// The missing record alone, after the others, so that no other record lacks its entry.
	g.Eventually(func() []int {
		a, _ := rec.deliveries("transient")
		b, _ := rec.deliveries("status")
		return []int{len(a), len(b)}
	}, 20*time.Second, 10*time.Millisecond).Should(Equal([]int{2, 2}))
	dt.Produce(t, prod, &kgo.Record{Topic: cfg.Topics.Source, Key: []byte("missing"), Value: []byte("missing")})
	g.Expect(deadLetters(t, c, cfg.Topics.DeadLetter, 3)).To(HaveKeyWithValue("missing",
		headers.ReasonMaxRetriesExceeded+" "+batch.ErrorTypeResultMissing+" 3"))

	for _, v := range []string{"ok", "ok2"} {
		calls, infos := rec.deliveries(v)
		g.Expect(calls).To(HaveLen(1), v)
		g.Expect(infos[0].Attempt).To(BeEquivalentTo(1), v)
	}
	for _, v := range []string{"transient", "status"} {
		calls, infos := rec.deliveries(v)
		g.Expect(calls).To(HaveLen(2), v)
		g.Expect(calls[1]).To(BeNumerically(">", calls[0]), "%s: retried in a later batch", v)
		g.Expect(infos[1].Attempt).To(BeEquivalentTo(2), v)
		g.Expect(infos[1].IdempotencyKey).To(Equal(infos[0].IdempotencyKey), v)
		g.Expect(infos[1].FirstFailure).NotTo(BeZero(), v)
	}
	first, _ := rec.deliveries("ok")
	g.Expect(len(rec.call(first[0]).values)).To(BeNumerically(">", 1), "the first records were delivered together")
}

// TestBatchHandlerPanics: a panicking batch handler dead-letters every record of its batch with
// error type Panic, as a panicking Handler does its record, and the loop goes on delivering.
func TestBatchHandlerPanics(t *testing.T) {
	g := NewWithT(t)
	c, cfg := batchCluster(t, "batchpanic", 1, 100)
	var panicking atomic.Bool
	panicking.Store(true)
	var delivered sync.Map
	loop, err := retryloop.NewBatch(cfg, func(_ context.Context, recs []*kgo.Record) []error {
		if panicking.Load() {
			panic("nil map")
		}
		for _, r := range recs {
			delivered.Store(string(r.Value), true)
		}
		return make([]error, len(recs))
	}, retryloop.WithoutHTTP())
	g.Expect(err).NotTo(HaveOccurred())
	runLoop(t, loop)

	prod := dt.Client(t, c)
	for _, v := range []string{"a", "b", "c"} {
		dt.Produce(t, prod, &kgo.Record{Topic: cfg.Topics.Source, Key: []byte(v), Value: []byte(v)})
	}
	want := headers.ReasonNonRetriable + " Panic 1"
	g.Expect(deadLetters(t, c, cfg.Topics.DeadLetter, 3)).To(Equal(map[string]string{"a": want, "b": want, "c": want}))

	panicking.Store(false)
	dt.Produce(t, prod, &kgo.Record{Topic: cfg.Topics.Source, Key: []byte("after"), Value: []byte("after")})
	g.Eventually(func() bool { _, ok := delivered.Load("after"); return ok }, 20*time.Second, 10*time.Millisecond).Should(BeTrue())
}

// TestNewBatchConfig: NewBatch needs a handler; a config without delivery.batch gets the batch
// defaults, and one with it keeps its bounds.
func TestNewBatchConfig(t *testing.T) {
	g := NewWithT(t)
	_, cfg := batchCluster(t, "batchconfig", 1, 7)
	none := func(context.Context, []*kgo.Record) []error { return nil }

	_, err := retryloop.NewBatch(cfg, nil)
	g.Expect(err).To(MatchError(ContainSubstring("batch handler is required")))

	loop, err := retryloop.NewBatch(cfg, none, retryloop.WithoutHTTP())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(loop.Config().Delivery.Batch.MaxRecords).To(BeEquivalentTo(7))

	cfg.Delivery.Batch = nil
	loop, err = retryloop.NewBatch(cfg, none, retryloop.WithoutHTTP())
	g.Expect(err).NotTo(HaveOccurred())
	b := loop.Config().Delivery.Batch
	g.Expect(b).NotTo(BeNil())
	g.Expect([]any{b.MaxRecords, b.MaxBytes, b.MaxWait.Duration}).To(Equal([]any{
		int32(config.DefaultBatchMaxRecords), int64(config.DefaultBatchMaxBytes), config.DefaultBatchMaxWait}))
	g.Expect(cfg.Delivery.Batch).To(BeNil(), "NewBatch changed the caller's config")

	cfg.Delivery.Batch = &config.Batch{MaxRecords: config.MaxBatchRecords + 1}
	_, err = retryloop.NewBatch(cfg, none, retryloop.WithoutHTTP())
	g.Expect(err).To(MatchError(ContainSubstring("delivery.batch.maxRecords")))
}
