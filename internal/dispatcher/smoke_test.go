package dispatcher_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
)

func simplePolicy(maxAttempts int32, initial time.Duration) *v1.RetryPolicySpec {
	return &v1.RetryPolicySpec{
		MaxAttempts: maxAttempts,
		Backoff:     v1.Backoff{InitialDelay: dt.D(initial), Multiplier: "2", MaxDelay: dt.D(100 * initial)},
		Classification: &v1.Classification{DefaultAction: "DeadLetter", Rules: []v1.ClassificationRule{
			{Name: "transient", Action: v1.ActionRetry, HTTPStatuses: []v1.HTTPStatusMatch{"408", "429", "500-599"}},
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
	for _, h := range dl[0].Headers {
		t.Logf("%s=%s", h.Key, h.Value)
	}
}
