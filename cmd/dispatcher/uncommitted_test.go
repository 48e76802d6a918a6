package main_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
)

func TestStormUncommittedBound(t *testing.T) {
	const (
		n              = 2000
		maxInFlight    = 4
		maxUncommitted = 8
	)
	bin := dispatcherBinary(t)
	const group, src, dlq = "bound", "bound.src", "bound.dlq"
	sink := dt.NewSink(t, func(*dt.Request) dt.Response { return dt.Response{Delay: time.Millisecond} })
	pol := &v1.RetryPolicySpec{MaxAttempts: 2, Backoff: v1.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)}}
	cfg := dt.Config(nil, group, src, dlq, pol, sink.URL)
	c := clusterFor(t, cfg, 4, 4)
	cfg.Delivery.Ordering = v1.OrderingOrdered
	cfg.Delivery.MaxInFlight = maxInFlight
	cfg.Delivery.MaxUncommittedRecords = maxUncommitted
	cfgPath, logPath := writeConfig(t, t.TempDir(), cfg)
	prod := dt.Client(t, c, kgo.ProducerLinger(5*time.Millisecond))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: src, Key: []byte(strconv.Itoa(i % 97)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, prod, recs...)

	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: kerr.RebalanceInProgress, Count: -1})
	p := startDispatcher(t, bin, cfgPath, logPath)
	succeeded := func() int { k, _ := sink.Succeeded(); return k }
	// Wait until the deliveries stop (nothing new for 2 s) or clearly pass the bound.
	last, since := -1, time.Now()
	dt.Eventually(t, 60*time.Second, func() bool {
		k := succeeded()
		if k != last {
			last, since = k, time.Now()
		}
		return (k > 0 && time.Since(since) > 2*time.Second) || k > 10*(maxInFlight+maxUncommitted)
	}, "the deliveries stop or pass the bound")
	during := succeeded()
	t.Logf("%d records delivered while %d commits failed (maxInFlight %d + maxUncommittedRecords %d = %d)", during, fault.Hits(), maxInFlight, maxUncommitted, maxInFlight+maxUncommitted)
	if fault.Hits() == 0 {
		t.Errorf("no commit was attempted")
	}
	if during > maxInFlight+maxUncommitted {
		t.Errorf("%d source records delivered while no commit succeeded, more than maxInFlight + maxUncommittedRecords = %d: a crash now redelivers them all", during, maxInFlight+maxUncommitted)
	}
	fault.Remove()
	dt.Eventually(t, 60*time.Second, func() bool { return succeeded() >= n || exited(p) }, "all %d records delivered once commits work", n)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if p.err != nil {
		t.Errorf("the dispatcher exited with %v", p.err)
	}
}
