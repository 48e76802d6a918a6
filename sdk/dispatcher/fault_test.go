package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
)

// TestRetryProduceFaults fails the writes to a retry tier with kfake ControlKey (rejected, nothing
// written) until the test has seen 20 rejections and checked the commits while they went on, and
// then 10 more times after the append (written, but the acknowledgement is an
// error, so the producer retries what the broker already holds). While the faults are active no
// source offset may be committed past a record whose retry record is not acknowledged; afterwards
// every failed delivery has exactly one retry record (the idempotent producer deduplicates) and
// every record is delivered.
func TestRetryProduceFaults(t *testing.T) {
	const n = 50
	const rejections, afterAppend = 20, 10
	p := newPipeline(t, "fault", 1, simplePolicy(3, 50*time.Millisecond), func(r *dt.Request) dt.Response {
		if r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{}
	})
	tier := p.cfg.Topics.Retries[0].Name
	src := p.cfg.Topics.Source
	adm := kadm.NewClient(p.prod)
	ctx := context.Background()
	tierID := topicID(t, p, tier)

	var rejected atomic.Int32
	var released atomic.Bool // the test ends the rejections
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		touches := false
		for _, rt := range req.Topics {
			if rt.Topic == tier || rt.TopicID == tierID {
				touches = true
			}
		}
		if !touches || released.Load() {
			return nil, nil, false
		}
		rejected.Add(1)
		return rejectProduce(req, kerr.NotEnoughReplicas), nil, true
	})
	appended := p.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: tier, Err: kerr.NotEnoughReplicasAfterAppend, Count: afterAppend})

	start(t, dispatcher.Options{Config: p.cfg, KafkaOptions: []kgo.Opt{
		kgo.RetryBackoffFn(func(int) time.Duration { return 40 * time.Millisecond }),
		kgo.MetadataMinAge(50 * time.Millisecond), // a failed write waits for a metadata refresh
	}})
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: src, Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)

	committed := func(topic string) int64 {
		os, err := adm.FetchOffsets(ctx, p.cfg.ConsumerGroup)
		if errors.Is(err, kerr.GroupIDNotFound) {
			return 0 // the group has not committed yet
		}
		if err != nil {
			t.Fatalf("FetchOffsets: %v", err)
		}
		o, ok := os.Lookup(topic, 0)
		if !ok {
			return 0
		}
		return o.At
	}
	tierEnd := func() int64 {
		eo, err := adm.ListEndOffsets(ctx, tier)
		if err != nil {
			t.Fatalf("ListEndOffsets: %v", err)
		}
		o, _ := eo.Lookup(tier, 0)
		return o.Offset
	}

	// Phase 1: every write to the tier is rejected, so nothing may be committed. The rejections go
	// on until the test has checked that at least three times after the first of them.
	checks := 0
	var violation string
	dt.Eventually(t, 30*time.Second, func() bool {
		seen := rejected.Load()
		if c := committed(src); c != 0 {
			violation = fmt.Sprintf("source offset %d committed while every retry write was being rejected (%d rejections so far)", c, seen)
		} else if e := tierEnd(); e != 0 {
			violation = fmt.Sprintf("the tier holds %d records while writes are rejected", e)
		}
		if seen > 0 {
			checks++
		}
		return violation != "" || (seen >= rejections && checks >= 3)
	}, "%d rejected writes", rejections)
	released.Store(true)
	if violation != "" {
		t.Fatal(violation)
	}
	t.Logf("phase 1: %d checks of the committed offset while %d writes were rejected", checks, rejected.Load())

	// Phase 2: writes land but their acknowledgements fail; commits never pass the retry records
	// written so far.
	phase2 := 0
	dt.Eventually(t, 30*time.Second, func() bool {
		done := appended.Hits() >= afterAppend
		if c, w := committed(src), tierEnd(); c > w {
			violation = fmt.Sprintf("source offset %d committed but only %d retry records exist", c, w)
		}
		phase2++
		return violation != "" || done
	}, "%d acknowledgements failed after the append", afterAppend)
	if violation != "" {
		t.Fatal(violation)
	}
	t.Logf("phase 2: %d checks while %d acknowledgements failed after the append", phase2, afterAppend)

	// Recovery: all delivered on attempt 2, one retry record per record, everything committed.
	p.sink.WaitFor(t, 30*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == n
	}, "all %d records delivered", n)
	dt.Eventually(t, 10*time.Second, func() bool { return committed(src) == n && committed(tier) == n },
		"source and tier committed to %d", n)
	retries := dt.ReadTopic(t, p.c, tier, n, 20*time.Second)
	seen := map[string]int{}
	for _, r := range retries {
		o, _ := dt.Header(r, headers.OriginalOffset)
		seen[o]++
	}
	if end := endOffset(t, p, tier, 0); len(retries) != n || len(seen) != n || end != n {
		t.Fatalf("the tier holds %d records (%d read) for %d distinct source records, want exactly %d", end, len(retries), len(seen), n)
	}
	if got := rejected.Load(); got < rejections {
		t.Errorf("rejections: %d, want at least %d", got, rejections)
	}
	if got := appended.Hits(); got != afterAppend {
		t.Errorf("after-append faults: %d", got)
	}
	_, answers := p.sink.Succeeded()
	if answers != n {
		t.Errorf("%d successful deliveries for %d records", answers, n)
	}
}
