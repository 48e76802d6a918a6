package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/retryops/retry-operator/internal/render"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/dispatcher"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/policy"
)

// TestSIGTERMWithinGracePeriod: a dispatcher under load (sink answering in 50 ms, maxInFlight 16,
// Unordered, drainTimeout 5 s) gets SIGTERM twice, then a third one finishes the records:
//
//   - round "drain": the SIGTERM finds 16 deliveries that the sink answers 2 s after they
//     arrived: the drain waits for them, and the final commit must cover them;
//   - round "abandon": the SIGTERM finds 16 deliveries that the sink never answers: the drain
//     times out, they are abandoned (delivered again by the next dispatcher), and the rest of the
//     stop (final commit, leaving the group) runs after the drain timeout.
//
// Asserts, per round: exit status 0, in less than the pod's terminationGracePeriodSeconds as
// render.Deployment computes it (ceil(drainTimeout) + render.ShutdownMargin = 20 s) and within
// drainTimeout + dispatcher.ShutdownAfterDrain; "drain" before the drain timeout, "abandon" after
// it; the group left (the broker saw a LeaveGroup after the SIGTERM, inside the grace period, and
// the group has no member right after the exit, long before its 10 s session timeout); the log
// shows the stop ("Stopping on signal", "Abandoning in-flight deliveries after the drain timeout"
// in round "abandon", "Stopped consuming", then "Dispatcher stopped"); the group's committed
// offsets, read after the exit, cover every record the sink had answered 200 by the exit (the
// drained deliveries included). And in the end: every record delivered, and no record that had
// finished before a SIGTERM delivered again after it (no successful delivery twice at all).
func TestSIGTERMWithinGracePeriod(t *testing.T) {
	skipUnderShort(t)
	const (
		n           = 3000
		maxInFlight = 16
		sinkDelay   = 50 * time.Millisecond
		drainDelay  = 2 * time.Second // round "drain": answered within the drain timeout
		drain       = 5 * time.Second
	)
	// terminationGracePeriodSeconds as render.Deployment computes it.
	grace := time.Duration(int64(math.Ceil(drain.Seconds()))+render.ShutdownMargin) * time.Second
	bin := dispatcherBinary(t)
	const group, src, dlq = "sigterm", "sigterm.src", "sigterm.dlq"
	// mode: 0 answers in sinkDelay; 1 in drainDelay; 2 never (until the dispatcher gives up on
	// the request). slowIn counts the requests that arrived in mode 1 or 2.
	var mode, slowIn atomic.Int32
	sink := dt.NewSink(t, func(*dt.Request) dt.Response {
		switch mode.Load() {
		case 1:
			slowIn.Add(1)
			return dt.Response{Delay: drainDelay}
		case 2:
			slowIn.Add(1)
			return dt.Response{Delay: time.Minute}
		}
		return dt.Response{Delay: sinkDelay}
	})
	pol := &policy.Spec{MaxAttempts: 2, Backoff: policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)}}
	cfg := dt.Config(nil, group, src, dlq, pol, sink.URL)
	topics := map[string]int32{src: 4, dlq: 1}
	for _, tn := range cfg.Topics.Retries.Names() {
		topics[tn] = 4
	}
	c := dt.Cluster(t, topics)
	cfg.Kafka.BootstrapServers = c.ListenAddrs()
	cfg.Delivery.Ordering = config.OrderingUnordered
	cfg.Delivery.MaxInFlight = maxInFlight
	cfg.DrainTimeout = dt.PD(drain)
	cfg.Group.SessionTimeout = dt.PD(10 * time.Second) // a leave is seen long before the session would expire
	cfg.Group.HeartbeatInterval = dt.PD(500 * time.Millisecond)
	cfg.Group.RebalanceTimeout = dt.PD(20 * time.Second)
	health := freePort(t)
	cfg.Listen = config.Listen{MetricsAddress: config.Disabled, HealthAddress: health}
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.json")
	logPath := func(round int) string { return filepath.Join(dir, fmt.Sprintf("dispatcher-%d.log", round)) }
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for r := range 3 {
				if b, err := os.ReadFile(logPath(r)); err == nil {
					t.Logf("dispatcher log of round %d:\n%s", r, b)
				}
			}
		}
	})

	// The broker's view of the group: when a member left it, and when offsets were committed.
	var leaveAt, lastCommitAt atomic.Int64
	c.ControlKey(int16(kmsg.LeaveGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		leaveAt.Store(time.Now().UnixNano())
		return nil, nil, false
	})
	c.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		lastCommitAt.Store(time.Now().UnixNano())
		return nil, nil, false
	})

	prod := dt.Client(t, c, kgo.ProducerLinger(5*time.Millisecond))
	adm := kadm.NewClient(prod)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: src, Key: []byte(strconv.Itoa(i % 97)), Value: []byte(strconv.Itoa(i))}
	}
	dt.Produce(t, prod, recs...)
	succeeded := func() int { k, _ := sink.Succeeded(); return k }
	finishedKeys := func() map[string]bool {
		out := map[string]bool{}
		for _, r := range sink.Requests() {
			if r.Status == http.StatusOK {
				out[r.Key] = true
			}
		}
		return out
	}

	type stopped struct {
		finished map[string]bool // answered 200 by the exit
		exitAt   time.Time
	}
	var rounds []stopped
	for round, name := range []string{"drain", "abandon"} {
		lp := logPath(round)
		p := startDispatcher(t, bin, cfgPath, lp)
		target := (round + 1) * n / 5
		dt.Eventually(t, 30*time.Second, func() bool { return succeeded() >= target || exited(p) }, "round %s: %d records delivered", name, target)
		if exited(p) {
			t.Fatalf("round %s: the dispatcher exited early: %v", name, p.err)
		}
		dt.Eventually(t, 5*time.Second, func() bool { return sink.InFlight() >= maxInFlight/2 }, "round %s: deliveries in flight", name)
		// Slow answers from now on; wait until every slot holds one.
		slowIn.Store(0)
		mode.Store(int32(round + 1))
		dt.Eventually(t, 5*time.Second, func() bool { return slowIn.Load() >= maxInFlight && sink.InFlight() == int(slowIn.Load()) },
			"round %s: %d slow deliveries in flight", name, maxInFlight)
		inFlight, before := sink.InFlight(), len(finishedKeys())

		sigAt := time.Now()
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		dt.Eventually(t, 2*grace, func() bool { return exited(p) }, "round %s: the dispatcher exiting after SIGTERM", name)
		took := time.Since(sigAt) // real time is what the kubelet's grace period counts
		mode.Store(0)
		gi := c.GroupInfo(group)
		members := -1
		if gi != nil {
			members = len(gi.Members)
		}
		// Wait for the sink to log what the exit cut short, then take what finished.
		dt.Eventually(t, 5*time.Second, func() bool { return sink.InFlight() == 0 }, "round %s: the sink idle after the exit", name)
		fin := finishedKeys()
		rounds = append(rounds, stopped{finished: fin, exitAt: time.Now()})
		leave, commit := time.Unix(0, leaveAt.Load()), time.Unix(0, lastCommitAt.Load())
		t.Logf("round %s: SIGTERM with %d slow deliveries in flight and %d records finished: exit after %v (grace period %v, drainTimeout %v + ShutdownAfterDrain %v), status %v; last commit %v and LeaveGroup %v after the SIGTERM; %d records finished by the exit; %d members in the group after it",
			name, inFlight, before, took.Round(time.Millisecond), grace, drain, dispatcher.ShutdownAfterDrain, p.err,
			commit.Sub(sigAt).Round(time.Millisecond), leave.Sub(sigAt).Round(time.Millisecond), len(fin), members)
		if took >= grace {
			t.Errorf("round %s: the dispatcher took %v to stop after SIGTERM, not less than the grace period %v", name, took, grace)
		}
		if bound := drain + dispatcher.ShutdownAfterDrain; took > bound {
			t.Errorf("round %s: the dispatcher took %v to stop after SIGTERM, more than drainTimeout + dispatcher.ShutdownAfterDrain = %v", name, took, bound)
		}
		switch name {
		case "drain":
			if took >= drain {
				t.Errorf("round drain: the stop took %v, not less than the drain timeout %v, although the deliveries end after %v", took, drain, drainDelay)
			}
			if len(fin) < before+inFlight {
				t.Errorf("round drain: %d records finished by the exit, want the %d finished before the SIGTERM and the %d drained", len(fin), before, inFlight)
			}
		case "abandon":
			if took < drain {
				t.Errorf("round abandon: the dispatcher stopped %v after SIGTERM, before the drain timeout %v with %d deliveries hanging", took, drain, inFlight)
			}
		}
		if p.err != nil {
			t.Errorf("round %s: the dispatcher exited with %v after SIGTERM", name, p.err)
		}
		if leave.Before(sigAt) || leave.Sub(sigAt) >= grace {
			t.Errorf("round %s: no LeaveGroup between the SIGTERM and the end of the grace period (last at %v after the SIGTERM)", name, leave.Sub(sigAt))
		}
		if members != 0 {
			t.Errorf("round %s: the group has %d members right after the exit, want 0 (it left)", name, members)
		}
		logb, err := os.ReadFile(lp)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{`"msg":"Stopping on signal"`, `"msg":"Stopped consuming"`, `"msg":"Dispatcher stopped"`}
		if name == "abandon" {
			want = append(want, `"msg":"Abandoning in-flight deliveries after the drain timeout`)
		}
		for _, w := range want {
			if !strings.Contains(string(logb), w) {
				t.Errorf("round %s: the dispatcher log has no %s", name, w)
			}
		}
		if i, j := strings.Index(string(logb), `"msg":"Stopped consuming"`), strings.Index(string(logb), `"msg":"Dispatcher stopped"`); i < 0 || j < i {
			t.Errorf("round %s: the log does not show Stopped consuming, then Dispatcher stopped", name)
		}

		// The final commit covers everything that finished.
		offs, err := adm.FetchOffsets(context.Background(), group)
		if err != nil {
			t.Fatal(err)
		}
		uncovered := 0
		for k := range fin {
			topic, part, off := splitKey(k)
			if topic != src {
				continue
			}
			if o, ok := offs.Lookup(src, part); !ok || off >= o.At {
				uncovered++
				if uncovered <= 5 {
					t.Errorf("round %s: record %s finished by the exit but the committed offset of its partition is %d", name, k, o.At)
				}
			}
		}
		if uncovered > 0 {
			t.Errorf("round %s: %d records that finished by the exit are not covered by the committed offsets", name, uncovered)
		}
	}

	// A last dispatcher delivers the rest, and nothing that had finished.
	p := startDispatcher(t, bin, cfgPath, logPath(2))
	dt.Eventually(t, 60*time.Second, func() bool { return succeeded() >= n }, "all %d records delivered", n)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	again := make([]int, len(rounds))
	for _, r := range sink.Requests() {
		if r.Status != http.StatusOK {
			continue
		}
		for i, st := range rounds {
			if st.finished[r.Key] && r.At.After(st.exitAt) {
				again[i]++
				if again[i] <= 5 {
					t.Errorf("record %s had finished before SIGTERM %d and was delivered again after it", r.Key, i+1)
				}
			}
		}
	}
	dup := 0
	for _, cnt := range sink.SuccessCounts() {
		dup += cnt - 1
	}
	t.Logf("after the restarts: %v records delivered again that had finished before each SIGTERM; %d successful redeliveries in all", again, dup)
	if dup > 0 {
		t.Errorf("%d records delivered successfully more than once", dup)
	}
}

// splitKey splits an idempotency key "<topic>/<partition>/<offset>".
func splitKey(k string) (topic string, partition int32, offset int64) {
	i := strings.LastIndexByte(k, '/')
	if i < 0 {
		return k, -1, -1
	}
	offset, _ = strconv.ParseInt(k[i+1:], 10, 64)
	rest := k[:i]
	j := strings.LastIndexByte(rest, '/')
	if j < 0 {
		return rest, -1, offset
	}
	p, _ := strconv.Atoi(rest[j+1:])
	return rest[:j], int32(p), offset
}

// TestStormUncommittedBound isolates what the rebalance storm ran into: while a member's commits
// do not land (here every OffsetCommit fails; in the storm, franz-go holds commits while a
// JoinGroup/SyncGroup is under way, for seconds while another member drains or a dead member's
// session runs out), an Ordered dispatcher must stop starting source records once
// maxUncommittedRecords finished records wait for their commit (sdk/dispatcher/doc.go: "a
// crash redelivers at most maxInFlight + maxUncommittedRecords records"). One dispatcher, Ordered,
// 4 partitions, maxInFlight 4, maxUncommittedRecords 8; every commit fails until the test removes
// the fault. Asserts that the sink saw at most maxInFlight + maxUncommittedRecords successful
// deliveries while no commit could succeed, then that everything is delivered once the commits
// work again.
func TestStormUncommittedBound(t *testing.T) {
	skipUnderShort(t)
	const (
		n              = 2000
		maxInFlight    = 4
		maxUncommitted = 8
	)
	bin := dispatcherBinary(t)
	const group, src, dlq = "bound", "bound.src", "bound.dlq"
	sink := dt.NewSink(t, func(*dt.Request) dt.Response { return dt.Response{Delay: time.Millisecond} })
	pol := &policy.Spec{MaxAttempts: 2, Backoff: policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)}}
	cfg := dt.Config(nil, group, src, dlq, pol, sink.URL)
	c := clusterFor(t, cfg, 4, 4)
	cfg.Delivery.Ordering = config.OrderingOrdered
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
