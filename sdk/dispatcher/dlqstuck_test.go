package dispatcher_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// undeliverable is a handler that dead-letters every record at once.
var undeliverable = dispatcher.HandlerFunc(func(context.Context, *dispatcher.Delivery) dispatcher.Result {
	return dispatcher.Result{Undeliverable: true}
})

// TestDeadLetterKeyTooLarge: a dead letter too large because of its key (not its value) is written
// stripped (key, value and user headers dropped; coordinates and reason kept) within a bounded
// time, and the partition goes on.
func TestDeadLetterKeyTooLarge(t *testing.T) {
	p := newPipeline(t, "dlq-key-too-large", 1, simplePolicy(3, 30*time.Millisecond), nil)
	start(t, dispatcher.Options{Config: p.cfg, Handler: undeliverable,
		KafkaOptions: []kgo.Opt{kgo.ProducerBatchMaxBytes(4096)}})
	dt.Produce(t, p.prod,
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strings.Repeat("k", 8192)), Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: "user", Value: []byte("h")}}},
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("behind"), Value: []byte("v")})
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 2, 20*time.Second)
	if len(dl) != 2 {
		t.Fatalf("dead letters: %d, want 2", len(dl))
	}
	s := dl[0]
	if len(s.Key) != 0 || len(s.Value) != 0 {
		t.Errorf("stripped dead letter: key %d bytes, value %d bytes; want none", len(s.Key), len(s.Value))
	}
	if _, ok := dt.Header(s, "user"); ok {
		t.Errorf("stripped dead letter kept a user header")
	}
	for _, h := range []string{headers.OriginalTopic, headers.OriginalPartition, headers.OriginalOffset, headers.Reason, headers.ErrorType} {
		if _, ok := dt.Header(s, h); !ok {
			t.Errorf("stripped dead letter lacks %s", h)
		}
	}
	if off, _ := dt.Header(s, headers.OriginalOffset); off != "0" {
		t.Errorf("stripped dead letter: original offset %q, want 0", off)
	}
	if string(dl[1].Key) != "behind" {
		t.Errorf("second dead letter %q, want behind", dl[1].Key)
	}
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, p.cfg.Topics.Source, 0) == 2 }, "both offsets committed")
}

// TestDeadLetterTopicRejects: a dead letter topic that rejects every write (not authorised): after
// bounded tries, readiness is false, the stuck gauge shows it, the source offset is not committed
// past the record, and a stop does not wait for it. The engine runs on a fake clock, stepped only to
// bring the waits between tries: a stop that waited for the stuck dead letter (its drain timeout or
// the next try) would never return, as the clock stands still.
func TestDeadLetterTopicRejects(t *testing.T) {
	p := newPipeline(t, "dlq-rejects", 1, simplePolicy(3, 30*time.Millisecond), nil)
	p.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: p.cfg.Topics.DeadLetter, Err: kerr.TopicAuthorizationFailed, Count: -1})
	p.cfg.DrainTimeout = dt.PD(9 * time.Second)
	reg := prometheus.NewRegistry()
	fc := clocktesting.NewFakeClock(time.Now())
	r := start(t, dispatcher.Options{Config: p.cfg, Handler: undeliverable, Registerer: reg, Clock: fc})
	produced := fc.Now()
	dt.Produce(t, p.prod, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("k"), Value: []byte("v")})
	// The tries wait 1s and 2s, then the stripped write follows at once; stepping by 100ms passes
	// each wait whenever the engine gets to it.
	dt.Eventually(t, 30*time.Second, func() bool {
		if dt.Gauge(reg, metrics.StuckDeadLetters) == 1 {
			return true
		}
		fc.Step(100 * time.Millisecond)
		return false
	}, "the dead letter reported stuck")
	if d := fc.Since(produced); d < 3*time.Second {
		t.Errorf("stuck after %v of the engine's clock, before the tries' waits of 1s and 2s", d)
	}
	if r.e.Ready() {
		t.Errorf("ready while a dead letter is stuck")
	}
	if c := p.committed(t, p.cfg.Topics.Source, 0); c > 0 {
		t.Errorf("source offset %d committed past the stuck record", c)
	}
	r.stopped = true
	r.cancel()
	dt.Eventually(t, 30*time.Second, func() bool {
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			return true
		default:
			return false
		}
	}, "the stop, with the clock standing still: it waited for the stuck dead letter")
	if c := p.committed(t, p.cfg.Topics.Source, 0); c > 0 {
		t.Errorf("source offset %d committed past the stuck record after the stop", c)
	}
}
