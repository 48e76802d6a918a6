package dispatcher_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/metrics"
)

// replayAt is replayRecord's record replayed at now (its due time and its timestamp, as the
// replay writes it: the time of the produce).
func replayAt(t *testing.T, p *pipeline, key string, dlOff int64, now time.Time) *kgo.Record {
	t.Helper()
	h := func(k, v string) headers.Header { return headers.Header{Key: k, Value: []byte(v)} }
	dl := []headers.Header{
		h(headers.OriginalTopic, p.cfg.Topics.Source), h(headers.OriginalPartition, "0"),
		h(headers.OriginalOffset, strconv.FormatInt(dlOff, 10)), h(headers.OriginalTimestamp, headers.FormatTime(now.Add(-time.Hour))),
		h(headers.Attempts, "2"), h(headers.ErrorType, "HTTP503"), h(headers.Reason, headers.ReasonMaxRetriesExceeded),
		h(headers.Pipeline, p.cfg.PipelineID()),
	}
	hs, err := headers.ReplayHeaders(dl, p.cfg.Topics.DeadLetter, 0, dlOff, now)
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: p.cfg.Topics.Retries[0].Name, Key: []byte(key), Value: []byte(key), Timestamp: now}
	for _, x := range hs {
		r.Headers = append(r.Headers, kgo.RecordHeader(x))
	}
	return r
}

// A Replay writes records due at once into a one-hour tier, one after another (it is
// rate-limited): each is delivered when written. A replayed record fetched does not make the tier
// partition wait for its timestamp plus the tier's delay, which holds for a retry written when its
// delay started, not for a replay; the clock never moves.
func TestReplayedRecordsDoNotPauseTheirTier(t *testing.T) {
	p := newPipeline(t, "replay-lookahead", 1, simplePolicy(2, time.Hour), nil)
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	h, deliveries := clockHandler(fc, nil)
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Handler: h, Clock: fc, Registerer: reg})
	gauge := func(name string) float64 { return dt.Gauge(reg, name) }

	for i := range 3 {
		dt.Produce(t, p.prod, replayAt(t, p, "r"+strconv.Itoa(i), int64(i), fc.Now()))
		if d := next(t, deliveries, "replayed record "+strconv.Itoa(i)); d.attempt != 1 {
			t.Fatalf("replayed record %d delivered as attempt %d", i, d.attempt)
		}
		dt.Eventually(t, 20*time.Second, func() bool { return gauge(metrics.InFlight) == 0 && gauge(metrics.Buffered) == 0 },
			"the replayed record finished")
	}
	if n := gauge(metrics.PausedPartitions); n != 0 {
		t.Fatalf("%v partitions paused with nothing waiting", n)
	}
}
