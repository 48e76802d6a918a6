package dispatcher_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// replayRecord is the record that replays the dead letter <dlq>/0/<dlOff> of the source record at
// offset off, built as the replay producer does (headers.ReplayHeaders), to the first retry tier.
// prior is how many times the dead letter's record had been replayed before. The dead letter is
// this pipeline's: the replay names it, or the dispatcher would refuse it.
func replayRecord(t *testing.T, p *pipeline, key string, off, dlOff int64, prior int) *kgo.Record {
	t.Helper()
	h := func(k, v string) headers.Header { return headers.Header{Key: k, Value: []byte(v)} }
	dl := []headers.Header{
		h("trace-id", "t-"+key),
		h(headers.OriginalTopic, p.cfg.Topics.Source), h(headers.OriginalPartition, "0"),
		h(headers.OriginalOffset, strconv.FormatInt(off, 10)), h(headers.OriginalTimestamp, headers.FormatTime(time.Now().Add(-time.Hour))),
		h(headers.SourceTimestamp, headers.FormatTime(time.Now().Add(-time.Hour))),
		h(headers.Attempts, "3"), h(headers.FirstFailure, headers.FormatTime(time.Now().Add(-time.Hour))),
		h(headers.ErrorType, "HTTP503"), h(headers.Reason, headers.ReasonMaxRetriesExceeded), h(headers.Pipeline, p.cfg.PipelineID()),
	}
	if prior > 0 {
		dl = append(dl, h(headers.ReplayOf, p.cfg.Topics.DeadLetter+"/0/1"), h(headers.ReplayCount, strconv.Itoa(prior)))
	}
	hs, err := headers.ReplayHeaders(dl, p.cfg.Topics.DeadLetter, 0, dlOff, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: p.cfg.Topics.Retries[0].Name, Key: []byte(key), Value: []byte(key)}
	for _, x := range hs {
		r.Headers = append(r.Headers, kgo.RecordHeader(x))
	}
	return r
}

// TestReplayDeliveredAsFirstAttempt: a replayed dead letter on the first retry tier is delivered
// once, as attempt 1, with the original record's Idempotency-Key, its own headers and the replay's
// Retryops-Replay-Of and Retryops-Replay-Count.
func TestReplayDeliveredAsFirstAttempt(t *testing.T) {
	p := newPipeline(t, "replay-ok", 1, simplePolicy(3, 30*time.Millisecond), func(*dt.Request) dt.Response { return dt.Response{} })
	start(t, dispatcher.Options{Config: p.cfg})
	tier := p.cfg.Topics.Retries[0].Name
	dt.Produce(t, p.prod, replayRecord(t, p, "replayed", 42, 7, 1))
	dt.Eventually(t, 20*time.Second, func() bool { return p.committed(t, tier, 0) == 1 }, "the replay committed")
	rs := p.sink.Requests()
	if len(rs) != 1 {
		t.Fatalf("deliveries: %d, want 1", len(rs))
	}
	r := rs[0]
	if want := headers.IdempotencyKey(p.cfg.Topics.Source, 0, 42); r.Key != want || r.Attempt != 1 {
		t.Errorf("delivered with key %q attempt %d, want %q attempt 1", r.Key, r.Attempt, want)
	}
	if got, want := r.Header.Get(headers.HTTPReplayOf), p.cfg.Topics.DeadLetter+"/0/7"; got != want {
		t.Errorf("%s: %q, want %q", headers.HTTPReplayOf, got, want)
	}
	if got := r.Header.Get(headers.HTTPReplayCount); got != "2" {
		t.Errorf("%s: %q, want 2", headers.HTTPReplayCount, got)
	}
	if got := r.Header.Get(headers.HeaderName("trace-id")); got != "t-replayed" {
		t.Errorf("the original header: %q", got)
	}
	for name := range r.Header {
		if strings.HasPrefix(strings.ToLower(name), strings.ToLower(headers.HTTPKafkaHeaderPrefix+headers.Prefix)) {
			t.Errorf("a retryops header reached the sink: %s", name)
		}
	}
	if n := topicRecords(t, p, p.cfg.Topics.DeadLetter); n != 0 {
		t.Errorf("dead letters: %d", n)
	}
}

// TestReplayFailsToDeadLetter: a replay the sink always fails goes through the retry tiers from
// attempt 1 and ends in the dead letter topic after maxAttempts deliveries, every retry record and
// the dead letter carrying the replay headers unchanged, and every retry record its pipeline.
func TestReplayFailsToDeadLetter(t *testing.T) {
	p := newPipeline(t, "replay-fail", 1, simplePolicy(3, 30*time.Millisecond), func(*dt.Request) dt.Response { return dt.Response{Status: 503} })
	start(t, dispatcher.Options{Config: p.cfg})
	dt.Produce(t, p.prod, replayRecord(t, p, "again", 42, 9, 0))
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, 1, 20*time.Second)
	if len(dl) != 1 {
		t.Fatalf("dead letters: %d, want 1", len(dl))
	}
	want := map[string]string{
		headers.ReplayOf: p.cfg.Topics.DeadLetter + "/0/9", headers.ReplayCount: "1", headers.Attempts: "3",
		headers.Reason: headers.ReasonMaxRetriesExceeded, headers.OriginalOffset: "42", headers.OriginalTopic: p.cfg.Topics.Source,
	}
	for k, v := range want {
		if got, _ := dt.Header(dl[0], k); got != v {
			t.Errorf("dead letter %s = %q, want %q", k, got, v)
		}
	}
	if v, _ := dt.Header(dl[0], "trace-id"); v != "t-again" {
		t.Errorf("dead letter trace-id %q", v)
	}
	rs := p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 42))
	if len(rs) != 3 {
		t.Fatalf("deliveries: %d, want 3", len(rs))
	}
	for i, r := range rs {
		if r.Attempt != i+1 || r.Header.Get(headers.HTTPReplayOf) != want[headers.ReplayOf] {
			t.Errorf("delivery %d: attempt %d, %s %q", i, r.Attempt, headers.HTTPReplayOf, r.Header.Get(headers.HTTPReplayOf))
		}
	}
	// Every retry record written on the way carries the replay headers.
	var retries []*kgo.Record
	for _, tier := range dt.TierTopics(p.cfg) {
		retries = append(retries, allRecords(t, p, tier)...)
	}
	n := 0
	for _, r := range retries {
		if a, _ := dt.Header(r, headers.Attempts); a == "0" {
			continue // the replay itself
		}
		n++
		of, _ := dt.Header(r, headers.ReplayOf)
		c, _ := dt.Header(r, headers.ReplayCount)
		pl, _ := dt.Header(r, headers.Pipeline)
		if of != want[headers.ReplayOf] || c != "1" || pl != p.cfg.PipelineID() {
			t.Errorf("retry record on %s: replay.of %q count %q pipeline %q", r.Topic, of, c, pl)
		}
	}
	if n != 2 {
		t.Errorf("retry records: %d, want 2", n)
	}
}

// hostileReplay is a first-tier record with attempts 0 and the given replay headers ("" leaves one
// out).
func hostileReplay(p *pipeline, key, off, of, count string) *kgo.Record {
	r := tierRecord(p, key, off, "0", time.Now())
	if of != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers.ReplayOf, Value: []byte(of)})
	}
	if count != "" {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers.ReplayCount, Value: []byte(count)})
	}
	return r
}

// TestHostileReplayHeaders: tier records with attempts 0 but no valid replay headers, or with
// invalid replay headers on a retry, are each dead-lettered as malformed with a message naming the
// header, never delivered, and the partition goes on: the valid replay behind them is delivered.
func TestHostileReplayHeaders(t *testing.T) {
	p := newPipeline(t, "hostile-replay", 1, simplePolicy(3, 30*time.Millisecond), func(*dt.Request) dt.Response { return dt.Response{} })
	start(t, dispatcher.Options{Config: p.cfg})
	of := p.cfg.Topics.DeadLetter + "/0/1"
	cases := []struct {
		rec    *kgo.Record
		header string // named in the message
	}{
		{hostileReplay(p, "no-replay-of", "100", "", ""), headers.ReplayOf},
		{hostileReplay(p, "no-count", "101", of, ""), headers.ReplayCount},
		{hostileReplay(p, "count-0", "102", of, "0"), headers.ReplayCount},
		{hostileReplay(p, "count-101", "103", of, "101"), headers.ReplayCount},
		{hostileReplay(p, "count-2^63", "104", of, "9223372036854775808"), headers.ReplayCount},
		{hostileReplay(p, "count-negative", "105", of, "-1"), headers.ReplayCount},
		{hostileReplay(p, "of-garbage", "106", "\x00garbage\xff", "1"), headers.ReplayOf},
		{hostileReplay(p, "of-oversized", "107", strings.Repeat("x", 1<<16)+"/0/1", "1"), headers.ReplayOf},
		{hostileReplay(p, "of-bad-topic", "108", "a b/0/1", "1"), headers.ReplayOf},
		{hostileReplay(p, "of-negative", "109", "dlq/0/-1", "1"), headers.ReplayOf},
		{hostileReplay(p, "of-huge-partition", "110", "dlq/2147483648/1", "1"), headers.ReplayOf},
		{hostileReplay(p, "of-only-on-retry", "111", of, ""), headers.ReplayCount},
	}
	// A retry (attempts 1) with a garbage replay header is malformed as well.
	retry := tierRecord(p, "retry-garbage", "112", "1", time.Now())
	retry.Headers = append(retry.Headers, kgo.RecordHeader{Key: headers.ReplayOf, Value: []byte("garbage")}, kgo.RecordHeader{Key: headers.ReplayCount, Value: []byte("1")})
	cases = append(cases, struct {
		rec    *kgo.Record
		header string
	}{retry, headers.ReplayOf})
	cases[11].rec.Headers[4].Value = []byte("1") // of-only-on-retry: attempts 1, replay.of without a count
	var rs []*kgo.Record
	for _, c := range cases {
		rs = append(rs, c.rec)
	}
	rs = append(rs, replayRecord(t, p, "behind", 500, 2, 0))
	dt.Produce(t, p.prod, rs...)
	dl := dt.ReadTopic(t, p.c, p.cfg.Topics.DeadLetter, len(cases), 20*time.Second)
	if len(dl) != len(cases) {
		t.Fatalf("dead letters: %d, want %d", len(dl), len(cases))
	}
	// The dead letters are written as each record is found malformed, not necessarily in the order
	// produced (a record of a retry tier goes through its own path): match them by key.
	byKey := map[string]string{}
	for _, c := range cases {
		byKey[string(c.rec.Key)] = c.header
	}
	for _, d := range dl {
		reason, _ := dt.Header(d, headers.Reason)
		msg, _ := dt.Header(d, headers.ErrorMessage)
		t.Logf("%s: %s %q", d.Key, reason, msg)
		header, ok := byKey[string(d.Key)]
		delete(byKey, string(d.Key))
		if !ok || reason != headers.ReasonMalformed || !strings.Contains(msg, header) || len(msg) > 400 {
			t.Errorf("dead letter %q: reason %s, message %q; want one of the hostile records, %s, naming %s", d.Key, reason, msg, headers.ReasonMalformed, header)
		}
	}
	if len(byKey) != 0 {
		t.Errorf("no dead letter for %v", byKey)
	}
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the replay behind the hostile ones delivered")
	if rs := p.sink.Requests(); len(rs) != 1 || rs[0].Key != headers.IdempotencyKey(p.cfg.Topics.Source, 0, 500) || rs[0].Attempt != 1 {
		t.Errorf("deliveries: %+v", rs)
	}
}

// TestReplayStartsAFreshSchedule: a replay of a record consumed an hour ago, under a 30-minute
// deadline, is retried after a failure instead of being dead-lettered as past its deadline: the
// deadline counts from the replay, and a first-failure header it carries is ignored.
func TestReplayStartsAFreshSchedule(t *testing.T) {
	pol := simplePolicy(3, 30*time.Millisecond)
	pol.Deadline = dt.PD(30 * time.Minute)
	p := newPipeline(t, "replay-schedule", 1, pol, func(r *dt.Request) dt.Response {
		if r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	})
	start(t, dispatcher.Options{Config: p.cfg})
	begin := time.Now()
	rec := replayRecord(t, p, "fresh", 42, 3, 0)
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: headers.FirstFailure, Value: []byte(headers.FormatTime(begin.Add(-time.Hour)))})
	dt.Produce(t, p.prod, rec)
	p.sink.WaitFor(t, 20*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == 1
	}, "the replay delivered on its second attempt")
	rs := p.sink.ByKey(headers.IdempotencyKey(p.cfg.Topics.Source, 0, 42))
	if len(rs) != 2 || rs[0].Attempt != 1 || rs[1].Attempt != 2 {
		t.Fatalf("deliveries: %+v", rs)
	}
	var retry *kgo.Record
	for _, r := range allRecords(t, p, dt.TierTopics(p.cfg)[0]) {
		if a, _ := dt.Header(r, headers.Attempts); a == "1" {
			retry = r
		}
	}
	if retry == nil {
		t.Fatal("no retry record with attempts 1 on the first tier")
	}
	for _, k := range []string{headers.FirstFailure, headers.SourceTimestamp} {
		v, _ := dt.Header(retry, k)
		if at, err := headers.ParseTime(v); err != nil || at.Before(begin.Add(-time.Second)) {
			t.Errorf("retry record %s = %q, want the replay's time or later (%s)", k, v, headers.FormatTime(begin))
		}
	}
}
