package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// dispatcherBinary builds cmd/dispatcher once per test process.
func dispatcherBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "retryops-dispatcher-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "dispatcher")
		cmd := exec.Command("go", "build", "-o", binPath, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process exited
	err  error
}

func startDispatcher(t *testing.T, bin, cfgPath, logPath string) *proc {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), config.EnvConfig+"="+cfgPath, "RETRYOPS_LOG_LEVEL="+os.Getenv("RETRYOPS_LOG_LEVEL"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// TestCrashRecovery runs the dispatcher binary as a subprocess against an in-process Kafka and an
// HTTP sink, produces many small records (some failing transiently, some permanently, some on every
// attempt), SIGKILLs the dispatcher at 5 random points and restarts it, and finally stops it with
// SIGTERM. Every record must end up delivered successfully or in the dead letter queue (none lost);
// duplicate deliveries are counted per kill and must stay within what was in flight or finished but
// not yet committed: fewer than maxInFlight + maxUncommittedRecords (64 + 64 here) per kill.
//
// 5,000 records by default; RETRYOPS_LONG=1 runs 50,000.
func TestCrashRecovery(t *testing.T) {
	skipUnderShort(t)
	n := 5000
	if os.Getenv("RETRYOPS_LONG") == "1" {
		n = 50000
	}
	const kills = 5
	const maxInFlight, maxUncommitted = 64, 64
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 42))
	t.Logf("records %d, kills %d, seed %d", n, kills, seed)

	bin := dispatcherBinary(t)
	const group, src, dlq = "crash", "crash.src", "crash.dlq"
	pol := &policy.Spec{
		MaxAttempts: 3,
		Backoff:     policy.Backoff{InitialDelay: dt.D(50 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"500-599"}},
		}},
	}
	sinkKind := func(i int) string {
		switch {
		case i%100 == 7:
			return "permanent" // 400: dead letter after one attempt
		case i%97 == 5:
			return "always" // 503 every time: dead letter after 3 attempts
		case i%10 == 3:
			return "transient" // 503 once
		}
		return "ok"
	}
	sink := dt.NewSink(t, func(r *dt.Request) dt.Response {
		i, _ := strconv.Atoi(string(r.Body))
		switch sinkKind(i) {
		case "permanent":
			return dt.Response{Status: 400}
		case "always":
			return dt.Response{Status: 503}
		case "transient":
			if r.Attempt == 1 {
				return dt.Response{Status: 503}
			}
		}
		return dt.Response{}
	})
	cfg := dt.Config(nil, group, src, dlq, pol, sink.URL)
	c := clusterFor(t, cfg, 4, 4)
	cfg.Delivery.Ordering = config.OrderingUnordered
	cfg.Delivery.MaxInFlight = maxInFlight
	cfg.Delivery.MaxUncommittedRecords = maxUncommitted
	cfg.Group.SessionTimeout = dt.PD(time.Second)
	cfg.Group.HeartbeatInterval = dt.PD(100 * time.Millisecond)
	health := freePort(t)
	cfg.Listen = config.Listen{MetricsAddress: config.Disabled, HealthAddress: health}
	dir := t.TempDir()
	if d := os.Getenv("RETRYOPS_CRASH_DIR"); d != "" {
		dir = d // keep the dispatcher log
	}
	cfgPath, logPath := filepath.Join(dir, "config.json"), filepath.Join(dir, "dispatcher.log")
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				if len(b) > 20000 {
					b = b[len(b)-20000:]
				}
				t.Logf("dispatcher log (tail):\n%s", b)
			}
		}
	})
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// Produce everything first; the index is the value.
	prod := dt.Client(t, c, kgo.ProducerLinger(5*time.Millisecond))
	adm := kadm.NewClient(prod)
	keyOf := make([]string, n)
	recs := make([]*kgo.Record, 0, 1000)
	flush := func() {
		dt.Produce(t, prod, recs...)
		for _, r := range recs {
			i, _ := strconv.Atoi(string(r.Value))
			keyOf[i] = headers.IdempotencyKey(r.Topic, r.Partition, r.Offset)
		}
		recs = recs[:0]
	}
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: src, Key: []byte(strconv.Itoa(i % 251)), Value: []byte(strconv.Itoa(i))})
		if len(recs) == cap(recs) {
			flush()
		}
	}
	flush()

	// Kill points: successful deliveries reaching random thresholds.
	points := make([]int, kills)
	for i := range points {
		points[i] = n/20 + rng.IntN(n*17/20)
	}
	sort.Ints(points)
	succeeded := func() int { k, _ := sink.Succeeded(); return k }

	type killStat struct {
		at           int
		sinkInFlight int
		since        time.Time
		uncommitted  int
	}
	var stats []killStat
	start := time.Now()
	p := startDispatcher(t, bin, cfgPath, logPath)
	readyOK := false
	for k, at := range points {
		dt.Eventually(t, time.Minute, func() bool { return succeeded() >= at }, "%d records delivered before kill %d", at, k+1)
		if !readyOK {
			if resp, err := http.Get("http://" + health + "/readyz"); err == nil {
				readyOK = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
		}
		inflight := sink.InFlight()
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		uncommitted := uncommittedDeliveries(t, adm, group, src, sink)
		stats = append(stats, killStat{at: succeeded(), sinkInFlight: inflight, since: time.Now(), uncommitted: uncommitted})
		p = startDispatcher(t, bin, cfgPath, logPath)
	}

	// Every record ends delivered or dead-lettered.
	var wantDLQ, wantOK int
	for i := range n {
		if k := sinkKind(i); k == "permanent" || k == "always" {
			wantDLQ++
		} else {
			wantOK++
		}
	}
	dt.Eventually(t, 2*time.Minute, func() bool { return succeeded() == wantOK }, "all %d deliverable records delivered", wantOK)
	distinct := func(rs []*kgo.Record) int {
		m := map[string]bool{}
		for _, r := range rs {
			o, _ := dt.Header(r, headers.OriginalPartition)
			f, _ := dt.Header(r, headers.OriginalOffset)
			m[o+"/"+f] = true
		}
		return len(m)
	}
	var dead []*kgo.Record
	dt.Eventually(t, time.Minute, func() bool {
		dead = dt.ReadTopic(t, c, dlq, topicRecords(t, adm, dlq), 20*time.Second)
		return distinct(dead) >= wantDLQ
	}, "%d records dead-lettered", wantDLQ)
	// Graceful stop of the last instance: exit status 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	dt.Eventually(t, 30*time.Second, func() bool { return exited(p) }, "the dispatcher stopping on SIGTERM")
	if p.err != nil {
		t.Errorf("the dispatcher exited with %v after SIGTERM", p.err)
	}
	elapsed := time.Since(start)
	// Read the dead letters again after the stop, to count late duplicates too: all the topic holds.
	dead = dt.ReadTopic(t, c, dlq, topicRecords(t, adm, dlq), 20*time.Second)

	dlqCount := map[string]int{}
	for _, r := range dead {
		topic, _ := dt.Header(r, headers.OriginalTopic)
		part, _ := dt.Header(r, headers.OriginalPartition)
		off, _ := dt.Header(r, headers.OriginalOffset)
		dlqCount[topic+"/"+part+"/"+off]++
	}
	okCount := sink.SuccessCounts()
	lost, wrongDLQ := 0, 0
	for i := range n {
		key := keyOf[i]
		kind := sinkKind(i)
		switch {
		case okCount[key] == 0 && dlqCount[key] == 0:
			lost++
			if lost <= 5 {
				t.Errorf("record %d (%s, %s) lost", i, key, kind)
			}
		case (kind == "permanent" || kind == "always") != (dlqCount[key] > 0):
			wrongDLQ++
			if wrongDLQ <= 5 {
				t.Errorf("record %d (%s): kind %s but dead-lettered %d times, delivered %d times", i, key, kind, dlqCount[key], okCount[key])
			}
		}
	}

	// Duplicates: successful deliveries beyond the first, attributed to the kill they followed.
	dupPerKill := make([]int, kills)
	firstOK := map[string]bool{}
	dups := 0
	for _, r := range sink.Requests() {
		if r.Status != 200 {
			continue
		}
		if !firstOK[r.Key] {
			firstOK[r.Key] = true
			continue
		}
		dups++
		k := 0
		for k+1 < len(stats) && r.At.After(stats[k+1].since) {
			k++
		}
		dupPerKill[k]++
	}
	dlqDups := 0
	for _, cnt := range dlqCount {
		dlqDups += cnt - 1
	}
	t.Logf("%d records in %v (%.0f records/s including %d restarts): %d delivered, %d dead-lettered, %d lost, %d requests in all",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), kills, len(okCount), len(dlqCount), lost, sink.Count())
	for k, s := range stats {
		t.Logf("kill %d at %d delivered: %d requests in flight at the sink, %d source records delivered but not committed; %d duplicate deliveries after the restart",
			k+1, s.at, s.sinkInFlight, s.uncommitted, dupPerKill[k])
	}
	t.Logf("duplicates: %d successful deliveries, %d dead letters", dups, dlqDups)
	if lost > 0 || wrongDLQ > 0 {
		t.Fatalf("%d records lost, %d dead-lettered wrongly", lost, wrongDLQ)
	}
	// At a kill, fewer than maxInFlight + maxUncommittedRecords records are delivered or being
	// delivered without their offset committed, so that many at most are redelivered (plus what
	// the sink was answering at the kill). Attribution to a kill is by time and a redelivery may land
	// after the next kill, hence the slack per kill.
	perKill := maxInFlight + maxUncommitted - 1
	bound := 0
	for _, s := range stats {
		bound += perKill + s.sinkInFlight
	}
	if dups+dlqDups > bound {
		t.Errorf("%d redeliveries over %d kills, more than the bound %d (%d per kill)", dups+dlqDups, kills, bound, perKill)
	}
	for k, d := range dupPerKill {
		if d > 2*perKill {
			t.Errorf("kill %d caused %d duplicate deliveries, more than twice the bound per kill (%d)", k+1, d, perKill)
		}
	}
	if !readyOK {
		t.Errorf("/readyz of the dispatcher never answered 200")
	}
}

// uncommittedDeliveries counts the source records the sink answered 200 whose offsets are at or
// past the group's committed offset: what a restart will deliver again.
// topicRecords returns how many records a topic holds, in all its partitions.
func topicRecords(t *testing.T, adm *kadm.Client, topic string) int {
	t.Helper()
	eo, err := adm.ListEndOffsets(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	eo.Each(func(o kadm.ListedOffset) { n += int(o.Offset) })
	return n
}

func uncommittedDeliveries(t *testing.T, adm *kadm.Client, group, src string, sink *dt.Sink) int {
	t.Helper()
	os, err := adm.FetchOffsets(context.Background(), group)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for key, cnt := range sink.SuccessCounts() {
		_ = cnt
		var p int32
		var o int64
		var topic string
		if i := strings.LastIndexByte(key, '/'); i > 0 {
			o, _ = strconv.ParseInt(key[i+1:], 10, 64)
			rest := key[:i]
			j := strings.LastIndexByte(rest, '/')
			pp, _ := strconv.Atoi(rest[j+1:])
			p, topic = int32(pp), rest[:j]
		}
		if topic != src {
			continue
		}
		c, ok := os.Lookup(src, p)
		if !ok || o >= c.At {
			n++
		}
	}
	return n
}
