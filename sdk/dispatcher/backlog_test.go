package dispatcher_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
)

// TestRetryNotStarvedBySourceBacklog: a slow sink leaves thousands of source records waiting, more
// than maxBufferedRecords. A record that failed early is retried after its 100 ms backoff, not once
// the source backlog has drained: while the source's queue is full its partitions are paused, and
// polling goes on for the retry tiers (retried records waited seconds behind a source
// backlog in the rebalance storm).
func TestRetryNotStarvedBySourceBacklog(t *testing.T) {
	const n = 3000
	p := newPipeline(t, "backlog", 1, simplePolicy(3, 100*time.Millisecond), func(r *dt.Request) dt.Response {
		if string(r.Body) == "r10" && r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{Delay: 5 * time.Millisecond}
	})
	p.cfg.Delivery.Ordering = config.OrderingUnordered
	p.cfg.Delivery.MaxInFlight = 2
	p.cfg.Delivery.MaxBufferedRecords = 500
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte("r" + strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)
	start(t, dispatcher.Options{Config: p.cfg})
	p.sink.WaitFor(t, 60*time.Second, func(reqs []*dt.Request) bool {
		for _, r := range reqs {
			if string(r.Body) == "r10" && r.Attempt == 2 {
				return true
			}
		}
		return false
	}, "the failed record retried")
	var failed, retried time.Time
	delivered := 0
	for _, r := range p.sink.Requests() {
		switch {
		case string(r.Body) == "r10" && r.Attempt == 1:
			failed = r.At
		case string(r.Body) == "r10":
			retried = r.At
		case r.Status == 200 && retried.IsZero():
			delivered++
		}
	}
	wait := retried.Sub(failed)
	t.Logf("retried after %v, while %d of %d source records were delivered", wait.Round(time.Millisecond), delivered, n)
	if wait > 2*time.Second {
		t.Errorf("the retry waited %v behind the source backlog; its backoff is 100ms", wait)
	}
	if delivered >= n-1 {
		t.Errorf("the source backlog drained first (%d delivered): the test proves nothing", delivered)
	}
}
