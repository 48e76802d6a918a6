package dispatcher_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestPoisonPill: records that can never be delivered go to the dead letter queue with reason
// undeliverable at once, and the records behind them in the same partition are delivered: one larger
// than maxRecordBytes (never sent; its dead letter, too large for the dead letter topic, is written
// without its value), one the sink rejects with 413 (one delivery), and a retry-tier record whose
// retryops headers do not decode.
func TestPoisonPill(t *testing.T) {
	p := newPipeline(t, "poison", 1, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		if string(r.Body) == "too-large-for-sink" {
			return dt.Response{Status: 413, Body: "payload too large"}
		}
		return dt.Response{}
	})
	p.cfg.MaxRecordBytes = 1024
	// The dead letter topic takes at most 3000 bytes per batch: the 4 KiB record's dead letter is
	// rejected and written without its value.
	adm := kadm.NewClient(p.prod)
	resps, err := adm.AlterTopicConfigs(context.Background(), []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("3000")}},
		p.cfg.Topics.DeadLetter)
	if err == nil {
		for _, r := range resps {
			if r.Err != nil {
				err = fmt.Errorf("%w: %s", r.Err, r.ErrMessage)
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	start(t, dispatcher.Options{Config: p.cfg})
	var recs []*kgo.Record
	for i := range 10 {
		v := []byte(strconv.Itoa(i))
		switch i {
		case 3:
			v = make([]byte, 4096) // incompressible, so that the batch really is large
			rng := rand.New(rand.NewPCG(1, 2))
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
		case 6:
			v = []byte("too-large-for-sink")
		}
		recs = append(recs, &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte{byte(i)}, Value: v})
	}
	dt.Produce(t, p.prod, recs...)
	tier := p.cfg.Topics.Retries[0].Name
	dt.Produce(t, p.prod,
		&kgo.Record{Topic: tier, Key: []byte("malformed"), Value: []byte("m"), Headers: []kgo.RecordHeader{
			{Key: headers.Attempts, Value: []byte("one")}}},
		&kgo.Record{Topic: tier, Key: []byte("behind"), Value: []byte("b"), Headers: []kgo.RecordHeader{
			{Key: headers.OriginalTopic, Value: []byte(p.cfg.Topics.Source)},
			{Key: headers.OriginalPartition, Value: []byte("0")},
			{Key: headers.OriginalOffset, Value: []byte("999")},
			{Key: headers.OriginalTimestamp, Value: []byte(headers.FormatTime(time.Now()))},
			{Key: headers.Attempts, Value: []byte("1")},
			{Key: headers.Due, Value: []byte(headers.FormatTime(time.Now()))},
			{Key: headers.Pipeline, Value: []byte(p.cfg.PipelineID())},
		}})

	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 3, 20*time.Second)
	if len(dl) != 3 {
		t.Fatalf("dead letters: %d, want 3", len(dl))
	}
	want := map[string]string{
		string([]byte{3}): headers.ErrorTypeRecordTooLarge,
		string([]byte{6}): headers.ErrorTypePayloadTooLarge,
		"malformed":       headers.ErrorTypeMalformedHeaders,
	}
	for _, r := range dl {
		reason, _ := dt.Header(r, headers.Reason)
		et, _ := dt.Header(r, headers.ErrorType)
		msg, _ := dt.Header(r, headers.ErrorMessage)
		t.Logf("dead letter %q: reason %s, type %s, message %q", r.Key, reason, et, msg)
		if reason != headers.ReasonUndeliverable || et != want[string(r.Key)] {
			t.Errorf("dead letter %q: reason %s type %s, want undeliverable %s", r.Key, reason, et, want[string(r.Key)])
		}
		omitted, _ := dt.Header(r, headers.ValueOmitted)
		if string(r.Key) == string([]byte{3}) {
			if omitted != "4096" || len(r.Value) != 0 {
				t.Errorf("the oversized dead letter: value %d bytes, %s=%q; want it omitted", len(r.Value), headers.ValueOmitted, omitted)
			}
		} else if omitted != "" || len(r.Value) == 0 {
			t.Errorf("dead letter %q lost its value", r.Key)
		}
	}
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 9 // 8 healthy source records + the well-formed tier record
	}, "the records behind the poison pills delivered")
	for _, r := range p.sink.Requests() {
		if len(r.Body) > 1024 {
			t.Errorf("the oversized record was sent to the sink")
		}
	}
	if n := len(p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, recs[6].Offset))); n != 1 {
		t.Errorf("the 413 record was delivered %d times, want 1", n)
	}
	// The well-formed retry-tier record is delivered as attempt 2 with its original coordinates.
	rs := p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 999))
	if len(rs) != 1 || rs[0].Attempt != 2 {
		t.Fatalf("tier record deliveries: %+v", rs)
	}
	if got := rs[0].Header.Get(headers.HTTPKafkaKey); got != "behind" {
		t.Errorf("Kafka-Key %q", got)
	}
	// Binary keys are base64.
	r0 := p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, recs[0].Offset))
	if len(r0) != 1 || r0[0].Header.Get(headers.HTTPKafkaKeyEncoding) != "base64" ||
		r0[0].Header.Get(headers.HTTPKafkaKey) != base64.StdEncoding.EncodeToString([]byte{0}) {
		t.Errorf("binary key not sent as base64: %v", r0)
	}
}
