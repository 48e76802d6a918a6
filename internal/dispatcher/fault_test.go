package dispatcher_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/dispatcher"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
)

// TestRetryProduceFaults fails the writes to a retry tier 20 times with kfake ControlKey (rejected,
// nothing written) and then 10 more times after the append (written, but the acknowledgement is an
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
	p.c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		p.c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		touches := false
		for _, rt := range req.Topics {
			if rt.Topic == tier || rt.TopicID == tierID {
				touches = true
			}
		}
		if !touches || rejected.Load() >= rejections {
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

	// Phase 1: every write to the tier is rejected, so nothing may be committed.
	checks := 0
	for rejected.Load() < rejections {
		c := committed(src)
		if rejected.Load() >= rejections {
			break // the faults ended while we looked
		}
		checks++
		if c != 0 {
			t.Fatalf("source offset %d committed while every retry write was being rejected (%d rejections so far)", c, rejected.Load())
		}
		if e := tierEnd(); e != 0 {
			t.Fatalf("the tier holds %d records while writes are rejected", e)
		}
		<-time.After(5 * time.Millisecond)
	}
	t.Logf("phase 1: %d checks of the committed offset while %d writes were rejected", checks, rejections)
	if checks == 0 {
		t.Fatal("no check ran while the faults were active")
	}

	// Phase 2: writes land but their acknowledgements fail; commits never pass the retry records
	// written so far.
	phase2 := 0
	for appended.Hits() < afterAppend {
		c := committed(src)
		w := tierEnd()
		phase2++
		if c > w {
			t.Fatalf("source offset %d committed but only %d retry records exist", c, w)
		}
		<-time.After(5 * time.Millisecond)
	}
	t.Logf("phase 2: %d checks while %d acknowledgements failed after the append", phase2, afterAppend)

	// Recovery: all delivered on attempt 2, one retry record per record, everything committed.
	p.sink.WaitFor(t, 30*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == n
	}, "all %d records delivered", n)
	dt.Eventually(t, 10*time.Second, func() bool { return committed(src) == n && committed(tier) == n },
		"source and tier committed to %d", n)
	retries := dt.ReadTopic(t, p.c, tier, n+1, 2*time.Second)
	seen := map[string]int{}
	for _, r := range retries {
		o, _ := dt.Header(r, headers.OriginalOffset)
		seen[o]++
	}
	if len(retries) != n || len(seen) != n {
		t.Fatalf("the tier holds %d records for %d distinct source records, want exactly %d", len(retries), len(seen), n)
	}
	if got := rejected.Load(); got != rejections {
		t.Errorf("rejections: %d", got)
	}
	if got := appended.Hits(); got != afterAppend {
		t.Errorf("after-append faults: %d", got)
	}
	_, answers := p.sink.Succeeded()
	if answers != n {
		t.Errorf("%d successful deliveries for %d records", answers, n)
	}
}
