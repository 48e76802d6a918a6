package dispatcher_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/metrics"
)

func offsetOf(deliveredFrom string) (part string, off int64) {
	i := strings.LastIndexByte(deliveredFrom, '/')
	off, _ = strconv.ParseInt(deliveredFrom[i+1:], 10, 64)
	return deliveredFrom[:i], off
}

// TestOrderedDelivery: in Ordered mode each source partition is delivered one record at a time in
// offset order, while partitions are delivered in parallel; retry-tier records come at their own
// due times.
func TestOrderedDelivery(t *testing.T) {
	const n = 300
	p := newPipeline(t, "ordered", 3, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		v, _ := strconv.Atoi(string(r.Body))
		if v%7 == 0 && r.Attempt == 1 {
			return dt.Response{Status: 503}
		}
		return dt.Response{Delay: time.Millisecond}
	})
	p.cfg.Delivery.MaxInFlight = 10
	start(t, dispatcher.Options{Config: p.cfg})
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Key: []byte(strconv.Itoa(i % 17)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)
	p.sink.WaitFor(t, 30*time.Second, func([]*dt.Request) bool {
		keys, _ := p.sink.Succeeded()
		return keys == n
	}, "all delivered")

	last := map[string]int64{}
	tierDeliveries := 0
	for _, r := range p.sink.Requests() {
		part, off := offsetOf(r.DeliveredFrom)
		if strings.Contains(part, ".retry.") {
			tierDeliveries++ // a retry tier delivers each record at its own due time
			continue
		}
		if prev, ok := last[part]; ok && off <= prev {
			t.Errorf("partition %s: offset %d delivered after %d", part, off, prev)
		}
		last[part] = off
	}
	overall, _ := p.sink.MaxConcurrent()
	per := p.sink.MaxConcurrentPer()
	t.Logf("%d deliveries (%d from retry tiers) over %d source partitions; max concurrent %d overall, per partition %v",
		p.sink.Count(), tierDeliveries, len(last), overall, per)
	for part, n := range per {
		if !strings.Contains(part, ".retry.") && n != 1 {
			t.Errorf("max concurrent deliveries from source partition %s = %d, want 1 in Ordered mode", part, n)
		}
	}
	if overall < 2 {
		t.Errorf("partitions were not delivered in parallel (max concurrent %d)", overall)
	}
	if tierDeliveries != (n+6)/7 {
		t.Errorf("%d retry deliveries, want %d", tierDeliveries, (n+6)/7)
	}
}

// TestUnorderedMaxInFlight: Unordered mode delivers up to maxInFlight records at once (and no
// more) and commits only up to the lowest unfinished offset of each partition; while one record is
// stuck, deliveries go on past it until maxUncommittedRecords finished records wait for their
// commit, then stop: a crash could redeliver fewer than maxInFlight + maxUncommittedRecords.
func TestUnorderedMaxInFlight(t *testing.T) {
	const n, maxInFlight, maxUncommitted, slowAt = 200, 8, 20, 10
	slow := make(chan struct{})
	p := newPipeline(t, "unordered", 1, simplePolicy(3, 30*time.Millisecond), func(r *dt.Request) dt.Response {
		if string(r.Body) == strconv.Itoa(slowAt) {
			select { // the record at offset 10 stays in flight until released
			case <-slow:
			case <-time.After(20 * time.Second):
			}
			return dt.Response{}
		}
		return dt.Response{Delay: 5 * time.Millisecond}
	})
	p.cfg.Delivery.Ordering = config.OrderingUnordered
	p.cfg.Delivery.MaxInFlight = maxInFlight
	p.cfg.Delivery.MaxUncommittedRecords = maxUncommitted
	p.cfg.DrainTimeout = dt.PD(5 * time.Second)
	reg := prometheus.NewRegistry()
	start(t, dispatcher.Options{Config: p.cfg, Registerer: reg})
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: p.cfg.Topics.Source, Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, p.prod, recs...)

	committed := func() int64 { return p.committed(t, p.cfg.Topics.Source, 0) }
	// The stuck record is the only delivery left; the records finished past it wait for their
	// commit, and no delivery starts while maxUncommittedRecords of them wait.
	var uncommitted int
	dt.Eventually(t, 20*time.Second, func() bool {
		uncommitted = int(dt.Gauge(reg, metrics.Uncommitted))
		return dt.Gauge(reg, metrics.InFlight) == 1 && uncommitted >= maxUncommitted && committed() == slowAt &&
			p.sink.Count() == slowAt+uncommitted
	}, "deliveries stop past the stuck record (answered %d)", p.sink.Count())
	t.Logf("stuck at offset %d: %d delivered past it, committed %d", slowAt, uncommitted, committed())
	if 1+uncommitted > maxInFlight+maxUncommitted-1 {
		t.Errorf("%d records uncommitted, more than maxInFlight + maxUncommittedRecords - 1 = %d", 1+uncommitted, maxInFlight+maxUncommitted-1)
	}
	close(slow)
	dt.Eventually(t, 10*time.Second, func() bool { return committed() == n }, "commit reaches %d", n)
	if keys, _ := p.sink.Succeeded(); keys != n {
		t.Errorf("%d delivered", keys)
	}
	overall, _ := p.sink.MaxConcurrent()
	t.Logf("max concurrent deliveries %d (maxInFlight %d)", overall, maxInFlight)
	if overall > maxInFlight {
		t.Errorf("max concurrent deliveries %d exceeds maxInFlight %d", overall, maxInFlight)
	}
	if overall < maxInFlight {
		t.Errorf("max concurrent deliveries %d never reached maxInFlight %d", overall, maxInFlight)
	}
}
