package librarymode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	corev1 "k8s.io/api/core/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/retryloop"
)

const (
	sinkMessage    = "order 7 rejected: unknown sku"
	handlerMessage = "order 7 rejected by the handler: unknown sku"
	unavailable    = "inventory unavailable"
)

// deadLetterHeaders are the retryops.* headers of a dead letter whose last failure was an HTTP
// status that a rule matched (the table in sdk/headers' documentation).
var deadLetterHeaders = []string{
	headers.OriginalTopic, headers.OriginalPartition, headers.OriginalOffset, headers.OriginalTimestamp,
	headers.Attempts, headers.FirstFailure, headers.LastFailure, headers.ErrorType, headers.ErrorMessage,
	headers.HTTPStatus, headers.Rule, headers.Reason, headers.ConsumerGroup, headers.Pipeline,
}

// differByNature are the headers whose values differ between the two dead letters by nature: when
// the deliveries failed, and what failed (a sink's answer body, a handler's error). Everything else
// a dead letter says must agree; the Entry fields read from these, and where the dead letter landed
// and when, are masked likewise (maskNature).
var differByNature = []string{headers.FirstFailure, headers.LastFailure, headers.ErrorMessage}

// failingRecord is the record both runs fail: the same key, value, user headers and timestamp.
func failingRecord(ts time.Time) *kgo.Record {
	return &kgo.Record{
		Topic: source, Key: []byte("order-7"), Value: []byte(`{"sku":"X-1"}`), Timestamp: ts,
		Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("4bf92f3577b34da6")}, {Key: "tenant", Value: []byte("acme")}},
	}
}

// TestLibraryModeDeadLettersAreTheDispatchers: the same pipeline, rendered by the operator, in sink
// mode (the dispatcher's engine and HTTP sink) and in template mode (a library-mode consumer), fails
// the same record the same way (503, 503, then 400, which a rule dead-letters); both dead letters,
// read through the operator's one reader, carry the same headers and say the same things.
func TestLibraryModeDeadLettersAreTheDispatchers(t *testing.T) {
	ts := time.Now().UTC().Truncate(time.Millisecond) // Kafka keeps milliseconds
	p, rp, dlq := resources()
	tiers := tiers(t, p, rp)

	// (a) The dispatcher: sink mode, the engine with the HTTP sink cmd/dispatcher builds.
	sink := dt.NewSink(t, func(r *dt.Request) dt.Response {
		if r.Attempt < 3 {
			return dt.Response{Status: 503, Body: unavailable}
		}
		return dt.Response{Status: 400, Body: sinkMessage}
	})
	ca := cluster(t, tiers)
	sinkMode := p.DeepCopy()
	sinkMode.Spec.Sink = &retryv1alpha1.Sink{URI: sink.URL}
	cfgA := renderedConfig(t, sinkMode, rp, dlq, ca.ListenAddrs())
	e, err := dispatcher.New(dispatcher.Options{Config: cfgA, Handler: dispatcher.NewHTTPSink(cfgA.Sink.URL, int(cfgA.Delivery.MaxInFlight))})
	if err != nil {
		t.Fatal(err)
	}
	a, srcA := runOne(t, ca, e.Run, ts)
	var sinkAttempts []int
	for _, r := range sink.ByKey(srcKey(srcA)) {
		sinkAttempts = append(sinkAttempts, r.Attempt)
	}
	if got := sinkAttempts; !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("the sink saw attempts %v, want [1 2 3]", got)
	}

	// (b) A library-mode consumer: template mode, retryloop.New with a handler failing the same way.
	cb := cluster(t, tiers)
	templateMode := p.DeepCopy()
	templateMode.Spec.Template = &retryv1alpha1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "orders", Image: "example.com/orders:1"}}}}
	cfgB := renderedConfig(t, templateMode, rp, dlq, cb.ListenAddrs())
	var mu sync.Mutex
	var attempts []int
	loop, err := retryloop.New(cfgB, func(ctx context.Context, r *kgo.Record) error {
		info, _ := retryloop.Info(ctx)
		mu.Lock()
		attempts = append(attempts, int(info.Attempt))
		mu.Unlock()
		if info.Attempt < 3 {
			return retryloop.HTTPStatus(503, errors.New(unavailable))
		}
		return retryloop.HTTPStatus(400, errors.New(handlerMessage))
	}, retryloop.WithoutHTTP(), retryloop.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	b, srcB := runOne(t, cb, loop.Run, ts)
	mu.Lock()
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("the handler saw attempts %v, want [1 2 3]", attempts)
	}
	mu.Unlock()

	// The two configs are the operator's one rendering: only the sink and the brokers differ.
	same := *cfgB
	same.Sink, same.Kafka.BootstrapServers = cfgA.Sink, cfgA.Kafka.BootstrapServers
	if !reflect.DeepEqual(&same, cfgA) {
		t.Errorf("the sink-mode and template-mode configs differ beyond the sink and the brokers:\n%+v\n%+v", cfgA, cfgB)
	}

	checkDeadLetter(t, "the dispatcher's", a, srcA, cfgA, sinkMessage)
	checkDeadLetter(t, "the library's", b, srcB, cfgB, handlerMessage)
	if ka, kb := headerKeys(a), headerKeys(b); !slices.Equal(ka, kb) {
		t.Errorf("header keys differ:\n dispatcher %q\n library    %q", ka, kb)
	}
	if d := diff(maskNature(a), maskNature(b)); len(d) > 0 {
		t.Errorf("the dead letters differ beyond %q:\n%s", differByNature, strings.Join(d, "\n"))
	}
}

// runOne runs run (an engine's or a loop's Run) on c, produces the failing record and returns its
// one dead letter, as read by the operator's reader, and the record as produced. It stops run
// first, so that a second dead letter would be seen.
func runOne(t *testing.T, c *kfake.Cluster, run func(context.Context) error, ts time.Time) (deadletters.Entry, *kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	src := failingRecord(ts)
	dt.Produce(t, dt.Client(t, c), src)
	g := gomega.NewWithT(t)
	g.Eventually(func() int { return len(readDeadLetters(t, c)) }).WithTimeout(timeout).WithPolling(20*time.Millisecond).
		Should(gomega.BeNumerically(">=", 1), "a dead letter")
	cancel()
	g.Eventually(done).WithTimeout(timeout).Should(gomega.Receive(gomega.BeNil()), "Run returns nil once stopped")
	dls := readDeadLetters(t, c)
	if len(dls) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dls))
	}
	return dls[0], src
}

func srcKey(r *kgo.Record) string {
	return headers.IdempotencyKey(r.Topic, r.Partition, r.Offset)
}

// checkDeadLetter checks what one dead letter says: the record as it was, why, after how many
// deliveries, from where and by whom; message is what the last failure said.
func checkDeadLetter(t *testing.T, who string, e deadletters.Entry, src *kgo.Record, cfg *config.Config, message string) {
	t.Helper()
	want := []string{"tenant", "trace-id"}
	want = append(want, deadLetterHeaders...)
	slices.Sort(want)
	if got := headerKeys(e); !slices.Equal(got, want) {
		t.Errorf("%s dead letter's header keys:\n got  %q\n want %q", who, got, want)
	}
	for _, h := range src.Headers {
		if v, _ := headerValue(e, h.Key); v != string(h.Value) {
			t.Errorf("%s dead letter's header %s = %q, want %q", who, h.Key, v, h.Value)
		}
	}
	if string(e.Key) != string(src.Key) || string(e.Value) != string(src.Value) {
		t.Errorf("%s dead letter holds key %q value %q, want %q %q", who, e.Key, e.Value, src.Key, src.Value)
	}
	type field struct {
		name      string
		got, want any
	}
	for _, f := range []field{
		{"reason", e.Reason, headers.ReasonNonRetriable},
		{"attempts", e.Attempts, 3},
		{"error type", e.ErrorType, "HTTP400"},
		{"error message", e.ErrorMessage, message},
		{"HTTP status", e.HTTPStatus, 400},
		{"rule", e.Rule, "bad-request"},
		{"pipeline", e.Pipeline, namespace + "/" + name},
		{"consumer group", e.ConsumerGroup, cfg.ConsumerGroup},
		{"original coordinates", [3]string{e.OriginalTopic, strconv.Itoa(int(e.OriginalPartition)), strconv.FormatInt(e.OriginalOffset, 10)},
			[3]string{src.Topic, strconv.Itoa(int(src.Partition)), strconv.FormatInt(src.Offset, 10)}},
		{"original timestamp", e.OriginalTimestamp, src.Timestamp.UTC()},
		{"all original headers valid", e.HasOriginal, true},
		{"replayed", e.ReplayOf != "" || e.ReplayCount != 0, false},
	} {
		if !reflect.DeepEqual(f.got, f.want) {
			t.Errorf("%s dead letter's %s: %v, want %v", who, f.name, f.got, f.want)
		}
	}
	if e.FirstFailure.IsZero() || !e.FirstFailure.Before(e.LastFailure) || e.Time.Before(e.LastFailure.Truncate(time.Millisecond)) {
		t.Errorf("%s dead letter's times: first failure %v, last %v, dead-lettered %v; want first < last <= dead-lettered",
			who, e.FirstFailure, e.LastFailure, e.Time)
	}
}

// diff lists the fields of two entries that differ, and their values (dispatcher's, library's).
func diff(a, b deadletters.Entry) []string {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	var out []string
	for i := range va.NumField() {
		if fa, fb := va.Field(i).Interface(), vb.Field(i).Interface(); !reflect.DeepEqual(fa, fb) {
			out = append(out, fmt.Sprintf(" %s: %s / %s", va.Type().Field(i).Name, show(fa), show(fb)))
		}
	}
	return out
}

// show formats a field of an Entry; byte slices and headers as text.
func show(v any) string {
	switch v := v.(type) {
	case []byte:
		return strconv.Quote(string(v))
	case []kafka.Header:
		hs := make([]string, len(v))
		for i, h := range v {
			hs[i] = h.Key + "=" + string(h.Value)
		}
		return fmt.Sprintf("%q", hs)
	}
	return fmt.Sprintf("%v", v)
}

// maskNature is e without what differs by nature (differByNature's headers and fields) and without
// where and when it was dead-lettered. Each run has a cluster of its own, so the original offsets
// agree; checkDeadLetter checks them against each run's record.
func maskNature(e deadletters.Entry) deadletters.Entry {
	e.ID, e.Time = deadletters.ID{}, time.Time{}
	e.FirstFailure, e.LastFailure, e.ErrorMessage = time.Time{}, time.Time{}, ""
	hs := slices.Clone(e.Headers)
	for i, h := range hs {
		if slices.Contains(differByNature, h.Key) {
			hs[i].Value = nil
		}
	}
	e.Headers = hs
	return e
}
