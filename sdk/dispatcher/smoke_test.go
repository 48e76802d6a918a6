package dispatcher_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
)

func simplePolicy(maxAttempts int32, initial time.Duration) *policy.Spec {
	return &policy.Spec{
		MaxAttempts: maxAttempts,
		Backoff:     policy.Backoff{InitialDelay: dt.D(initial), Multiplier: "2", MaxDelay: dt.D(100 * initial)},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"408", "429", "500-599"}},
		}},
	}
}

func TestSmoke(t *testing.T) {
	p := newPipeline(t, "smoke", 2, simplePolicy(3, 50*time.Millisecond), func(r *dt.Request) dt.Response {
		switch string(r.Body) {
		case "fail-once":
			if r.Attempt == 1 {
				return dt.Response{Status: 503}
			}
		case "bad":
			return dt.Response{Status: 400, Body: "nope"}
		}
		return dt.Response{}
	})
	start(t, dispatcher.Options{Config: p.cfg})
	var rs []*kgo.Record
	for i := range 10 {
		v := "ok"
		switch i {
		case 3:
			v = "fail-once"
		case 7:
			v = "bad"
		}
		rs = append(rs, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i)), Value: []byte(v)})
	}
	dt.Produce(t, p.prod, rs...)
	p.sink.WaitFor(t, 20*time.Second, func(reqs []*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 9
	}, "9 records delivered")
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 10*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %d", len(dl))
	}
	// The read stops at the first: the topic's end offsets say it holds no other.
	if n := topicRecords(t, p, p.cfg.Topics.DeadLetter); n != 1 {
		t.Fatalf("the dead-letter topic holds %d records, want 1", n)
	}
	checkSmokeDeadLetter(t, dl[0], rs[7], p.cfg)
}

// checkSmokeDeadLetter checks the dead letter of the record the sink rejected with 400 "nope" on
// its first delivery: its key and value, and every header, in order.
func checkSmokeDeadLetter(t *testing.T, d, src *kgo.Record, cfg *config.Config) {
	t.Helper()
	if string(d.Key) != "7" || string(d.Value) != "bad" {
		t.Errorf("dead letter key %q value %q, want 7 and bad", d.Key, d.Value)
	}
	failed, _ := dt.Header(d, headers.LastFailure)
	at, err := headers.ParseTime(failed)
	if err != nil || at.Before(src.Timestamp) {
		t.Errorf("%s %q: %v, want a time not before the record's %v", headers.LastFailure, failed, err, src.Timestamp)
	}
	want := [][2]string{
		{headers.OriginalTopic, cfg.Topics.Source},
		{headers.OriginalPartition, strconv.Itoa(int(src.Partition))},
		{headers.OriginalOffset, strconv.FormatInt(src.Offset, 10)},
		{headers.OriginalTimestamp, headers.FormatTime(src.Timestamp)},
		{headers.ConsumerGroup, cfg.ConsumerGroup},
		{headers.Pipeline, cfg.PipelineID()},
		{headers.Attempts, "1"},
		{headers.FirstFailure, failed}, // one failure: the first is the last
		{headers.LastFailure, failed},
		{headers.ErrorType, "HTTP400"},
		{headers.ErrorMessage, "nope"},
		{headers.HTTPStatus, "400"},
		{headers.Reason, headers.ReasonNonRetriable},
	}
	var got [][2]string
	for _, h := range d.Headers {
		got = append(got, [2]string{h.Key, string(h.Value)})
	}
	if !slices.Equal(got, want) {
		t.Errorf("dead letter headers:\n got  %q\n want %q", got, want)
	}
}
