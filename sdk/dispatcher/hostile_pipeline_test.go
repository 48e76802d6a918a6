package dispatcher_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestTierRecordOfAnotherPipeline: several pipelines may consume one source, so a retry-tier record
// names its pipeline. One naming another pipeline (misrouted or forged: another name, an
// over-long value, control characters), or a replay of another pipeline's dead letter, is
// dead-lettered as malformed (error type OtherPipelineRecord, which a Replay without a target
// skips) without being delivered, its dead letter naming this pipeline and the header's value,
// escaped and bounded. A tier record without the header is dead-lettered as undeliverable
// (MalformedRetryHeaders, naming the header) without being delivered. A tier record naming this
// pipeline, a replay of this pipeline's dead letter and the record behind them are delivered. A
// record naming two pipelines is another's whichever comes last.
func TestTierRecordOfAnotherPipeline(t *testing.T) {
	p := newPipeline(t, "tier-pipeline", 1, simplePolicy(3, time.Hour), nil) // a sink answering 200
	fc := clocktesting.NewFakeClock(time.Now().Truncate(time.Millisecond))
	start(t, dispatcher.Options{Config: p.cfg, Clock: fc})
	own := p.cfg.PipelineID()
	unnamed := func(key, off string) *kgo.Record {
		r := tierRecord(p, key, off, "1", fc.Now())
		r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == headers.Pipeline })
		return r
	}
	claiming := func(key, off, pipeline string) *kgo.Record {
		r := unnamed(key, off)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers.Pipeline, Value: []byte(pipeline)})
		return r
	}
	replayOf := func(key, off, pipeline string) *kgo.Record {
		dl := []headers.Header{{Key: headers.Pipeline, Value: []byte(pipeline)}}
		for _, h := range tierRecord(p, key, off, "3", fc.Now()).Headers[:4] { // the original coordinates
			dl = append(dl, headers.Header(h))
		}
		hs, err := headers.ReplayHeaders(dl, p.cfg.Topics.DeadLetter, 0, 1, fc.Now())
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Topic: p.cfg.Topics.Retries[0].Name, Key: []byte(key), Value: []byte(key)}
		for _, h := range hs {
			r.Headers = append(r.Headers, kgo.RecordHeader(h))
		}
		return r
	}
	twice := func(key, off, first, second string) *kgo.Record {
		r := claiming(key, off, first)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers.Pipeline, Value: []byte(second)})
		return r
	}
	long := own + strings.Repeat("x", 5000)
	hostile := map[string]string{ // key: the retryops.pipeline it claims
		"other":        "test/other",
		"long":         long,
		"control":      own + "\r\nX-Injected: 1",
		"other-replay": "test/other",
		"other-first":  "test/other",
		"other-last":   "test/other",
	}
	dt.Produce(t, p.prod,
		claiming("other", "500", hostile["other"]),
		claiming("long", "501", hostile["long"]),
		unnamed("unnamed", "502"),
		claiming("control", "503", hostile["control"]),
		claiming("own", "504", own),
		replayOf("other-replay", "505", hostile["other-replay"]),
		replayOf("own-replay", "506", own),
		twice("other-first", "507", hostile["other-first"], own),
		twice("other-last", "508", own, hostile["other-last"]),
		&kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte("behind"), Value: []byte("behind")})

	dls := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, len(hostile)+1, 20*time.Second)
	if len(dls) != len(hostile)+1 {
		t.Fatalf("dead letters: %d, want %d", len(dls), len(hostile)+1)
	}
	for _, dl := range dls {
		if string(dl.Key) == "unnamed" {
			reason, _ := dt.Header(dl, headers.Reason)
			et, _ := dt.Header(dl, headers.ErrorType)
			msg, _ := dt.Header(dl, headers.ErrorMessage)
			if reason != headers.ReasonUndeliverable || et != headers.ErrorTypeMalformedHeaders || msg != "missing "+headers.Pipeline {
				t.Errorf("dead letter unnamed: reason %s, error type %s, message %q; want %s, %s, naming %s",
					reason, et, msg, headers.ReasonUndeliverable, headers.ErrorTypeMalformedHeaders, headers.Pipeline)
			}
			continue
		}
		claimed, ok := hostile[string(dl.Key)]
		if !ok {
			t.Errorf("dead letter %q, which names this pipeline", dl.Key)
			continue
		}
		reason, _ := dt.Header(dl, headers.Reason)
		msg, _ := dt.Header(dl, headers.ErrorMessage)
		var pipelines []string
		for _, h := range dl.Headers {
			if h.Key == headers.Pipeline {
				pipelines = append(pipelines, string(h.Value))
			}
		}
		quoted := strings.TrimSuffix(strconv.QuoteToASCII(claimed[:min(len(claimed), 40)]), "\"")
		t.Logf("dead letter %q: reason %s, message %q", dl.Key, reason, msg)
		if reason != headers.ReasonMalformed || !strings.Contains(msg, headers.Pipeline) || !strings.Contains(msg, own) ||
			!strings.Contains(msg, quoted) || len(msg) > 300 || strings.ContainsAny(msg, "\r\n") {
			t.Errorf("dead letter %q: reason %s, message %q; want %s naming %s, the value claimed and %s",
				dl.Key, reason, msg, headers.ReasonMalformed, headers.Pipeline, own)
		}
		if et, _ := dt.Header(dl, headers.ErrorType); et != headers.ErrorTypeOtherPipeline {
			t.Errorf("dead letter %q: error type %q, want %s", dl.Key, et, headers.ErrorTypeOtherPipeline)
		}
		if len(pipelines) != 1 || pipelines[0] != own {
			t.Errorf("dead letter %q names pipelines %q, want only this one, %s", dl.Key, pipelines, own)
		}
	}
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 3
	}, "the own record, the own replay and the record behind delivered")
	for _, off := range []int64{500, 501, 502, 503, 505, 507, 508} {
		if n := len(p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, off))); n != 0 {
			t.Errorf("the record of offset %d, of another pipeline, was delivered %d times", off, n)
		}
	}
	for _, off := range []int64{504, 506} {
		if n := len(p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, off))); n != 1 {
			t.Errorf("the record of offset %d, of this pipeline, was delivered %d times, want 1", off, n)
		}
	}
}
