package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher"
	"github.com/retryops/retry-operator/internal/dispatcher/config"
	dt "github.com/retryops/retry-operator/internal/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/dispatcher/metrics"
	"github.com/retryops/retry-operator/internal/render"
)

// The storm harness: several dispatcher processes in one consumer group over an in-process kfake
// cluster and an HTTP test sink, with records whose fate is decided by their index (the record's
// value), and a churn loop that kills (SIGKILL), starts and stops (SIGTERM) members while they
// work. storm.finish checks that every record ended delivered or dead-lettered, counts duplicate
// deliveries against a bound derived from the config and the changes, and checks per-key order.

// stormConfig sizes a storm.
type stormConfig struct {
	name           string // consumer group and topic prefix
	records        int
	keys           int // Kafka keys; record i has key i%keys and sequence number i/keys
	partitions     int32
	brokers        int
	members        int
	maxInFlight    int32
	maxUncommitted int32
	drainTimeout   time.Duration
	churnMin       time.Duration // the churn loop waits between churnMin and churnMax between changes
	churnMax       time.Duration
	deadline       time.Duration // for every record to be accounted for
	sinkDelay      time.Duration // how long the sink takes to answer each request
	slowEvery      int           // one record in slowEvery is "slow" (0: none)
	slowDelay      time.Duration // how long the sink takes to answer a slow record
}

// kind is the fate of record i at the sink: "ok" (200), "transient" (503 on its first attempt,
// then 200: it goes through the first retry tier), "permanent" (400: dead-lettered after one
// attempt) or "slow" (200 after slowDelay, longer than the drain timeout: a change that moves its
// partition abandons it). About 19% transient and 1% permanent: 20% fail at least once.
func (sc *stormConfig) kind(i int) string {
	// Hashed rather than i%slowEvery, which would put every slow record on one key (i%keys).
	if sc.slowEvery > 0 && (uint32(i)*2246822519)>>7%uint32(sc.slowEvery) == 0 {
		return "slow"
	}
	h := (uint32(i) * 2654435761) >> 8 % 100
	switch {
	case h == 99:
		return "permanent"
	case h < 19:
		return "transient"
	}
	return "ok"
}

// stormMember is one dispatcher process slot: its config (own health and metrics ports) and log.
type stormMember struct {
	id               int
	cfgPath, logPath string
	health, metrics  string
	p                *proc // nil while down; guarded by storm.mu
	signalled        bool  // we sent the signal that ended p
}

// stormChange is one membership change made by the churn loop.
type stormChange struct {
	at       time.Time
	kind     string // kill, stop, start
	member   int
	alive    int           // members alive just before the change
	inFlight int           // requests the sink was answering at the change
	took     time.Duration // stop: from SIGTERM to exit
}

type storm struct {
	t         *testing.T
	sc        stormConfig
	bin       string
	c         *kfake.Cluster
	sink      *dt.Sink
	cfg       *config.Config
	src, dlq  string
	group     string
	keyOf     []string // record index -> idempotency key (source coordinates)
	indexOf   map[string]int
	members   []*stormMember
	started   time.Time
	dlqClient *kgo.Client

	mu        sync.Mutex
	changes   []stormChange
	paused    bool
	crashed   []string // members that exited without being signalled
	stopSlow  []string // members whose SIGTERM stop did not end in time
	churnStop chan struct{}
	churnDone chan struct{}

	dlqMu    sync.Mutex
	dead     map[string]int    // source coordinates -> dead letters written
	reason   map[string]string // source coordinates -> reason of the first dead letter
	dlqTotal int64             // dead letters read
}

// newStorm creates the cluster (source, retry tiers and dead letter topic), the sink, the member
// configs, produces the records and starts reading the dead letter topic. No member runs yet.
func newStorm(t *testing.T, sc stormConfig) *storm {
	t.Helper()
	s := &storm{t: t, sc: sc, bin: dispatcherBinary(t), src: sc.name + ".src", dlq: sc.name + ".dlq", group: sc.name,
		dead: map[string]int{}, reason: map[string]string{}, indexOf: map[string]int{}}
	pol := &v1.RetryPolicySpec{
		MaxAttempts: 3,
		Backoff:     v1.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)},
		Classification: &v1.Classification{DefaultAction: "DeadLetter", Rules: []v1.ClassificationRule{
			{Name: "transient", Action: v1.ActionRetry, HTTPStatuses: []v1.HTTPStatusMatch{"500-599"}},
		}},
	}
	s.sink = dt.NewSink(t, func(r *dt.Request) dt.Response {
		i, err := strconv.Atoi(string(r.Body))
		if err != nil {
			return dt.Response{Status: 400}
		}
		switch sc.kind(i) {
		case "slow":
			return dt.Response{Delay: sc.slowDelay}
		case "permanent":
			return dt.Response{Status: 400, Delay: sc.sinkDelay}
		case "transient":
			if r.Attempt == 1 {
				return dt.Response{Status: 503, Delay: sc.sinkDelay}
			}
		}
		return dt.Response{Delay: sc.sinkDelay}
	})
	s.cfg = dt.Config(nil, s.group, s.src, s.dlq, pol, s.sink.URL)
	topics := map[string]int32{s.src: sc.partitions, s.dlq: 1}
	for _, tn := range s.cfg.Topics.Retries.Names() {
		topics[tn] = sc.partitions
	}
	var opts []kfake.Opt
	if sc.brokers > 1 {
		opts = append(opts, kfake.NumBrokers(sc.brokers))
	}
	s.c = dt.Cluster(t, topics, opts...)
	s.cfg.Kafka.BootstrapServers = s.c.ListenAddrs()
	s.cfg.Delivery.Ordering = v1.OrderingOrdered
	s.cfg.Delivery.MaxInFlight = sc.maxInFlight
	s.cfg.Delivery.MaxUncommittedRecords = sc.maxUncommitted
	s.cfg.DrainTimeout = dt.PD(sc.drainTimeout)
	s.cfg.Group.SessionTimeout = dt.PD(2 * time.Second)
	s.cfg.Group.HeartbeatInterval = dt.PD(200 * time.Millisecond)
	s.cfg.Group.RebalanceTimeout = dt.PD(sc.drainTimeout + 10*time.Second)

	dir := t.TempDir()
	if d := os.Getenv("RETRYOPS_STORM_DIR"); d != "" {
		dir = filepath.Join(d, sc.name) // keep the logs
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for id := range sc.members {
		m := &stormMember{id: id, health: freePort(t), metrics: freePort(t),
			cfgPath: filepath.Join(dir, fmt.Sprintf("config-%d.json", id)), logPath: filepath.Join(dir, fmt.Sprintf("dispatcher-%d.log", id))}
		cfg := *s.cfg
		cfg.Listen = config.Listen{MetricsAddress: m.metrics, HealthAddress: m.health}
		data, err := json.Marshal(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(m.cfgPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s.members = append(s.members, m)
	}
	t.Cleanup(func() {
		s.stopChurn()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, m := range s.members {
			if m.p != nil {
				_ = m.p.cmd.Process.Kill()
				<-m.p.done
				m.p = nil
			}
		}
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, m := range s.members {
			if b, err := os.ReadFile(m.logPath); err == nil {
				if len(b) > 8000 {
					b = b[len(b)-8000:]
				}
				t.Logf("member %d log (tail, %s):\n%s", m.id, m.logPath, b)
			}
		}
	})

	// Produce every record: value i, key "k<i%keys>", so each key has records/keys records in
	// sequence order on one partition.
	start := time.Now()
	prod := dt.Client(t, s.c, kgo.ProducerLinger(5*time.Millisecond))
	s.keyOf = make([]string, sc.records)
	recs := make([]*kgo.Record, 0, 2000)
	flush := func() {
		dt.Produce(t, prod, recs...)
		for _, r := range recs {
			i, _ := strconv.Atoi(string(r.Value))
			k := headers.IdempotencyKey(r.Topic, r.Partition, r.Offset)
			s.keyOf[i] = k
			s.indexOf[k] = i
		}
		recs = recs[:0]
	}
	for i := range sc.records {
		recs = append(recs, &kgo.Record{Topic: s.src, Key: []byte("k" + strconv.Itoa(i%sc.keys)), Value: []byte(strconv.Itoa(i))})
		if len(recs) == cap(recs) {
			flush()
		}
	}
	flush()
	t.Logf("produced %d records over %d keys to %d partitions in %v", sc.records, sc.keys, sc.partitions, time.Since(start).Round(time.Millisecond))
	s.readDLQ()
	return s
}

// readDLQ reads the dead letter topic from its start for the rest of the test.
func (s *storm) readDLQ() {
	cl := dt.Client(s.t, s.c, kgo.ConsumeTopics(s.dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond))
	s.dlqClient = cl
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				topic, _ := dt.Header(r, headers.OriginalTopic)
				part, _ := dt.Header(r, headers.OriginalPartition)
				off, _ := dt.Header(r, headers.OriginalOffset)
				reason, _ := dt.Header(r, headers.Reason)
				k := topic + "/" + part + "/" + off
				s.dlqMu.Lock()
				s.dead[k]++
				if s.dead[k] == 1 {
					s.reason[k] = reason
				}
				s.dlqTotal++
				s.dlqMu.Unlock()
			})
		}
	}()
}

// deadCounts returns a copy of the dead letters read per source coordinates.
func (s *storm) deadCounts() map[string]int {
	s.dlqMu.Lock()
	defer s.dlqMu.Unlock()
	out := make(map[string]int, len(s.dead))
	for k, v := range s.dead {
		out[k] = v
	}
	return out
}

// missing returns the records neither delivered (a 2xx at the sink) nor dead-lettered yet.
func (s *storm) missing() []int {
	ok := s.sink.SuccessCounts()
	dead := s.deadCounts()
	var out []int
	for i, k := range s.keyOf {
		if ok[k] == 0 && dead[k] == 0 {
			out = append(out, i)
		}
	}
	return out
}

// spawnDispatcher is startDispatcher for any goroutine: it returns an error rather than failing the
// test, and leaves the cleanup to the storm.
func spawnDispatcher(bin, cfgPath, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), config.EnvConfig+"="+cfgPath, "RETRYOPS_LOG_LEVEL="+os.Getenv("RETRYOPS_LOG_LEVEL"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func exited(p *proc) bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// reapLocked notes members that exited on their own (s.mu held).
func (s *storm) reapLocked() {
	for _, m := range s.members {
		if m.p != nil && exited(m.p) && !m.signalled {
			s.crashed = append(s.crashed, fmt.Sprintf("member %d exited unasked at %v: %v", m.id, time.Since(s.started).Round(time.Millisecond), m.p.err))
			m.p = nil
		}
	}
}

func (s *storm) aliveLocked() (alive, down []*stormMember) {
	s.reapLocked()
	for _, m := range s.members {
		if m.p != nil {
			alive = append(alive, m)
		} else {
			down = append(down, m)
		}
	}
	return alive, down
}

// startLocked starts member m (s.mu held) and records the change (not at the storm's start,
// alive < 0).
func (s *storm) startLocked(m *stormMember, alive int) {
	p, err := spawnDispatcher(s.bin, m.cfgPath, m.logPath)
	if err != nil {
		s.crashed = append(s.crashed, fmt.Sprintf("member %d cannot start: %v", m.id, err))
		return
	}
	m.p, m.signalled = p, false
	if alive < 0 {
		return
	}
	s.changes = append(s.changes, stormChange{at: time.Now(), kind: "start", member: m.id, alive: alive, inFlight: s.sink.InFlight()})
}

// killLocked SIGKILLs member m.
func (s *storm) killLocked(m *stormMember, alive int) {
	ch := stormChange{at: time.Now(), kind: "kill", member: m.id, alive: alive, inFlight: s.sink.InFlight()}
	m.signalled = true
	_ = m.p.cmd.Process.Signal(syscall.SIGKILL)
	<-m.p.done
	m.p = nil
	s.changes = append(s.changes, ch)
}

// stopLocked SIGTERMs member m and waits for it to exit (SIGKILL after 30 s, noted as slow).
func (s *storm) stopLocked(m *stormMember, alive int) {
	ch := stormChange{at: time.Now(), kind: "stop", member: m.id, alive: alive, inFlight: s.sink.InFlight()}
	m.signalled = true
	_ = m.p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.p.done:
		if m.p.err != nil {
			s.crashed = append(s.crashed, fmt.Sprintf("member %d exited with %v after SIGTERM", m.id, m.p.err))
		}
	case <-time.After(30 * time.Second):
		s.stopSlow = append(s.stopSlow, fmt.Sprintf("member %d still running 30s after SIGTERM at %v", m.id, ch.at.Sub(s.started).Round(time.Millisecond)))
		_ = m.p.cmd.Process.Kill()
		<-m.p.done
	}
	ch.took = time.Since(ch.at)
	m.p = nil
	s.changes = append(s.changes, ch)
}

// startAll starts every member and waits for all of them to be ready.
func (s *storm) startAll() {
	s.t.Helper()
	s.started = time.Now()
	s.mu.Lock()
	for _, m := range s.members {
		s.startLocked(m, -1)
	}
	s.mu.Unlock()
	dt.Eventually(s.t, 30*time.Second, func() bool {
		for _, m := range s.members {
			if readyz(m.health) != http.StatusOK {
				return false
			}
		}
		return true
	}, "all %d members ready", len(s.members))
	s.t.Logf("%d members ready after %v", len(s.members), time.Since(s.started).Round(time.Millisecond))
}

// churn starts the churn loop: every churnMin..churnMax one change, keeping at least one member
// alive: a member down is started (always when only one is alive, else half the time); otherwise a
// random live member is killed (it stays down until a later start) or stopped and restarted.
func (s *storm) churn(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 13))
	s.churnStop, s.churnDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(s.churnDone)
		for {
			wait := s.sc.churnMin + time.Duration(rng.Int64N(int64(s.sc.churnMax-s.sc.churnMin)+1))
			select {
			case <-s.churnStop:
				return
			case <-time.After(wait):
			}
			s.mu.Lock()
			if s.paused {
				s.mu.Unlock()
				continue
			}
			alive, down := s.aliveLocked()
			switch {
			case len(down) > 0 && (len(alive) <= 1 || rng.IntN(2) == 0):
				s.startLocked(down[rng.IntN(len(down))], len(alive))
			case len(alive) <= 1:
			case rng.IntN(2) == 0:
				s.killLocked(alive[rng.IntN(len(alive))], len(alive))
			default:
				m := alive[rng.IntN(len(alive))]
				s.stopLocked(m, len(alive))
				s.startLocked(m, len(alive)-1)
			}
			s.mu.Unlock()
		}
	}()
}

func (s *storm) pauseChurn(p bool) {
	s.mu.Lock()
	s.paused = p
	s.mu.Unlock()
}

func (s *storm) stopChurn() {
	if s.churnStop == nil {
		return
	}
	select {
	case <-s.churnStop:
	default:
		close(s.churnStop)
	}
	<-s.churnDone
}

// waitAccounted waits until every record is delivered or dead-lettered, logging progress.
func (s *storm) waitAccounted(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		miss := s.missing()
		if len(miss) == 0 {
			s.t.Logf("all %d records accounted for after %v", s.sc.records, time.Since(s.started).Round(time.Millisecond))
			return
		}
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			s.mu.Lock()
			nch := len(s.changes)
			s.mu.Unlock()
			s.t.Logf("%v: %d of %d records not yet accounted for, %d requests, %d changes", time.Since(s.started).Round(time.Second), len(miss), s.sc.records, s.sink.Count(), nch)
		}
		if time.Now().After(deadline) {
			s.report(miss)
			s.t.Fatalf("after %v, %d records are neither delivered nor dead-lettered", timeout, len(miss))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// report describes records still missing: per partition, their offsets, and what the sink saw.
func (s *storm) report(miss []int) {
	byPart := map[string][]string{}
	for _, i := range miss {
		k := s.keyOf[i]
		p := k[:strings.LastIndexByte(k, '/')]
		byPart[p] = append(byPart[p], fmt.Sprintf("%s(i=%d,%s,%d reqs)", k[len(p)+1:], i, s.sc.kind(i), len(s.sink.ByKey(k))))
	}
	var parts []string
	for p := range byPart {
		parts = append(parts, p)
	}
	sort.Strings(parts)
	for _, p := range parts {
		rs := byPart[p]
		if len(rs) > 8 {
			rs = append(rs[:8], fmt.Sprintf("... %d in all", len(byPart[p])))
		}
		s.t.Logf("missing on %s: %s", p, strings.Join(rs, " "))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if offs, err := kadm.NewClient(s.dlqClient).FetchOffsets(ctx, s.group); err == nil {
		var committed []string
		offs.Each(func(o kadm.OffsetResponse) {
			committed = append(committed, fmt.Sprintf("%s/%d@%d", o.Topic, o.Partition, o.At))
		})
		sort.Strings(committed)
		s.t.Logf("committed offsets: %s", strings.Join(committed, " "))
	}
	s.mu.Lock()
	alive, _ := s.aliveLocked()
	s.mu.Unlock()
	for _, m := range alive {
		s.t.Logf("member %d: readyz %d, metrics: %s", m.id, readyz(m.health), strings.Join(scrapeLines(m.metrics,
			metrics.InFlight, metrics.Uncommitted, metrics.Buffered, metrics.PausedPartitions, metrics.StuckDeadLetters, metrics.ProduceErrorsTotal), "; "))
	}
}

// stopAll ends the churn and stops every live member with SIGTERM, then waits until the dead
// letter reader has read the whole topic (late duplicates included).
func (s *storm) stopAll() {
	s.t.Helper()
	s.stopChurn()
	s.mu.Lock()
	alive, _ := s.aliveLocked()
	var wg sync.WaitGroup
	var tookMu sync.Mutex
	var took []string
	for _, m := range alive {
		wg.Go(func() {
			at := time.Now()
			m.signalled = true
			_ = m.p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-m.p.done:
			case <-time.After(30 * time.Second):
				s.t.Errorf("member %d still running 30s after its final SIGTERM", m.id)
				_ = m.p.cmd.Process.Kill()
				<-m.p.done
			}
			if m.p.err != nil {
				s.t.Errorf("member %d exited with %v after its final SIGTERM", m.id, m.p.err)
			}
			tookMu.Lock()
			took = append(took, fmt.Sprintf("member %d %v", m.id, time.Since(at).Round(time.Millisecond)))
			tookMu.Unlock()
		})
	}
	wg.Wait()
	for _, m := range alive {
		m.p = nil
	}
	s.mu.Unlock()
	s.t.Logf("final stops: %s", strings.Join(took, ", "))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := kadm.NewClient(s.dlqClient).ListEndOffsets(ctx, s.dlq)
	if err != nil {
		s.t.Fatalf("dead letter end offsets: %v", err)
	}
	var end int64
	ends.Each(func(o kadm.ListedOffset) { end += o.Offset })
	dt.Eventually(s.t, 10*time.Second, func() bool {
		s.dlqMu.Lock()
		defer s.dlqMu.Unlock()
		return s.dlqTotal >= end
	}, "the dead letter reader reads all %d dead letters", end)
}

// logCount counts the lines of every member's log that contain substr.
func (s *storm) logCount(substr string) int {
	n := 0
	for _, m := range s.members {
		f, err := os.Open(m.logPath)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), substr) {
				n++
			}
		}
		f.Close()
	}
	return n
}

// stormResult holds the figures of a finished storm.
type stormResult struct {
	delivered, deadLettered, lost, wrong int
	dupOK, dupDLQ                        int
	bound                                int
	orderFirst, orderOK                  int // ordering violations: first attempts; first successes of records never retried
	kills, stops, starts, losses         int
}

// finish checks every record's fate, duplicates against their bound, and per-key order, after
// stopAll.
func (s *storm) finish() stormResult {
	t := s.t
	t.Helper()
	var res stormResult
	s.mu.Lock()
	crashed, slow, changes := s.crashed, s.stopSlow, append([]stormChange(nil), s.changes...)
	s.mu.Unlock()
	for _, c := range crashed {
		t.Errorf("dispatcher exit: %s", c)
	}
	for _, c := range slow {
		t.Errorf("slow stop: %s", c)
	}

	ok := s.sink.SuccessCounts()
	dead := s.deadCounts()
	for i, k := range s.keyOf {
		kind := s.sc.kind(i)
		switch {
		case ok[k] == 0 && dead[k] == 0:
			res.lost++
			if res.lost <= 10 {
				t.Errorf("record %d (%s, %s) lost: %d requests at the sink", i, k, kind, len(s.sink.ByKey(k)))
			}
		case (kind == "permanent") != (dead[k] > 0) || (kind == "permanent") == (ok[k] > 0):
			res.wrong++
			if res.wrong <= 10 {
				t.Errorf("record %d (%s): kind %s but dead-lettered %d times (reason %q), delivered %d times", i, k, kind, dead[k], s.reason[k], ok[k])
			}
		}
		if ok[k] > 0 {
			res.delivered++
			res.dupOK += ok[k] - 1
		}
		if dead[k] > 0 {
			res.deadLettered++
			res.dupDLQ += dead[k] - 1
		}
	}

	// The duplicate bound. What a change can make a record be delivered (or dead-lettered) twice
	// is a record that finished, or was being delivered, on a member while its offset was not
	// committed, and whose partition then moved to another member (or to the same one
	// restarted). Per member that is at most maxInFlight records being delivered plus
	// maxUncommittedRecords finished and waiting for their commit (the engine's back-pressure,
	// internal/dispatcher/doc.go "Commits"). So, per change:
	//   - kill (SIGKILL): the killed member's maxInFlight + maxUncommitted; and the rebalance that
	//     follows (its session expires) may revoke partitions of each survivor, which commits
	//     what finished and abandons at most maxInFlight deliveries after drainTimeout: maxInFlight
	//     per survivor;
	//   - stop (SIGTERM): a graceful stop commits what finished and abandons at most maxInFlight,
	//     and the survivors' revocations at most maxInFlight each: maxInFlight per member alive;
	//   - start: the rebalance revokes partitions from the members alive (maxInFlight each);
	//   - a loss the dispatcher logged (a session expired without a kill, e.g. a member starved of
	//     CPU): the lost member commits nothing, maxInFlight + maxUncommitted.
	// A duplicate dead letter is a redelivery too and counts against the same bound.
	// (The per-member figure is the engine's promise; TestStormUncommittedBound shows that today
	// it does not hold while commits are held up, which is what makes this check fail now and
	// then: a member keeps delivering during a long JoinGroup/SyncGroup, then dies or is evicted.)
	mif, unc := int(s.sc.maxInFlight), int(s.sc.maxUncommitted)
	for _, c := range changes {
		switch c.kind {
		case "kill":
			res.kills++
			res.bound += mif + unc + mif*(c.alive-1)
		case "stop":
			res.stops++
			res.bound += mif * c.alive
		case "start":
			res.starts++
			res.bound += mif * c.alive
		}
	}
	res.losses = s.logCount(`"msg":"Partitions lost"`)
	res.bound += res.losses * (mif + unc)

	// Per-key order. Arrival order at the sink is the requests' arrival times.
	reqs := s.sink.Requests()
	sort.SliceStable(reqs, func(a, b int) bool { return reqs[a].At.Before(reqs[b].At) })
	retried := map[int]bool{}
	for _, r := range reqs {
		if r.Attempt >= 2 {
			if i, err := strconv.Atoi(string(r.Body)); err == nil {
				retried[i] = true
			}
		}
	}
	lastFirst := map[int]int{} // key -> highest sequence number whose first attempt arrived
	lastOK := map[int]int{}    // key -> highest sequence number (never retried) whose first success arrived
	seenFirst, seenOK := map[int]bool{}, map[int]bool{}
	var examples []string
	for _, r := range reqs {
		i, err := strconv.Atoi(string(r.Body))
		if err != nil {
			continue
		}
		key, seq := i%s.sc.keys, i/s.sc.keys
		if r.Attempt == 1 && !seenFirst[i] {
			seenFirst[i] = true
			if last, ok := lastFirst[key]; ok && seq < last {
				res.orderFirst++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("key k%d: first attempt of seq %d (record %d, %s) arrived after seq %d's, at %v",
						key, seq, i, s.keyOf[i], last, r.At.Sub(s.started).Round(time.Millisecond)))
				}
			}
			lastFirst[key] = max(lastFirst[key], seq)
		}
		if r.Status/100 == 2 && !retried[i] && !seenOK[i] {
			seenOK[i] = true
			if last, ok := lastOK[key]; ok && seq < last {
				res.orderOK++
				if len(examples) < 10 {
					examples = append(examples, fmt.Sprintf("key k%d: seq %d (record %d, %s) first delivered after seq %d, at %v",
						key, seq, i, s.keyOf[i], last, r.At.Sub(s.started).Round(time.Millisecond)))
				}
			}
			lastOK[key] = max(lastOK[key], seq)
		}
	}

	t.Logf("%d records in %v: %d delivered, %d dead-lettered, %d lost, %d with the wrong outcome; %d requests in all",
		s.sc.records, time.Since(s.started).Round(time.Millisecond), res.delivered, res.deadLettered, res.lost, res.wrong, s.sink.Count())
	var stopTimes []string
	for _, c := range changes {
		if c.kind == "stop" {
			stopTimes = append(stopTimes, c.took.Round(time.Millisecond).String())
		}
	}
	t.Logf("changes: %d kills, %d stops (SIGTERM to exit: %s), %d starts; %d partition losses logged",
		res.kills, res.stops, strings.Join(stopTimes, " "), res.starts, res.losses)
	sumInFlight := 0
	for _, c := range changes {
		sumInFlight += c.inFlight
	}
	t.Logf("duplicates: %d successful redeliveries of %d records, %d duplicate dead letters; bound %d (maxInFlight %d, maxUncommittedRecords %d); %d requests in flight at the sink summed over the changes",
		res.dupOK, countDup(ok), res.dupDLQ, res.bound, mif, unc, sumInFlight)
	// How long the retried records waited: from the first failed attempt to the first arrival of
	// attempt 2 (policy: 100 ms, jittered; churn adds session timeouts and drains). Reported, not
	// asserted: under churn a tier partition may wait for its next owner.
	failedAt, retriedAt := map[int]time.Time{}, map[int]time.Time{}
	for _, r := range reqs {
		i, err := strconv.Atoi(string(r.Body))
		if err != nil {
			continue
		}
		if _, ok := failedAt[i]; !ok && r.Attempt == 1 && r.Status == 503 {
			failedAt[i] = r.At
		}
		if _, ok := retriedAt[i]; !ok && r.Attempt == 2 {
			retriedAt[i] = r.At
		}
	}
	var waits []time.Duration
	worstRetry := -1
	for i, f := range failedAt {
		if at, ok := retriedAt[i]; ok {
			waits = append(waits, at.Sub(f))
			if worstRetry < 0 || at.Sub(f) > retriedAt[worstRetry].Sub(failedAt[worstRetry]) {
				worstRetry = i
			}
		}
	}
	if len(waits) > 0 {
		sort.Slice(waits, func(a, b int) bool { return waits[a] < waits[b] })
		t.Logf("retry waits: median %v, p99 %v, max %v (record %d, %s, failed at %v)", waits[len(waits)/2].Round(time.Millisecond),
			waits[len(waits)*99/100].Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond), worstRetry, s.keyOf[worstRetry],
			failedAt[worstRetry].Sub(s.started).Round(time.Millisecond))
	}

	// Duplicates attributed, by arrival time, to the last change before them (a rough figure:
	// a redelivery may come after a later change).
	perChange := make([]int, len(changes)+1) // [0]: before the first change
	perKind := map[string]int{}
	firstOK := map[string]bool{}
	for _, r := range reqs {
		if r.Status/100 != 2 {
			continue
		}
		if !firstOK[r.Key] {
			firstOK[r.Key] = true
			continue
		}
		k := sort.Search(len(changes), func(j int) bool { return changes[j].at.After(r.At) })
		perChange[k]++
		if k > 0 {
			perKind[changes[k-1].kind]++
		}
	}
	worst, worstAt := 0, -1
	for k := 1; k < len(perChange); k++ {
		if perChange[k] > worst {
			worst, worstAt = perChange[k], k-1
		}
	}
	if worstAt >= 0 {
		c := changes[worstAt]
		t.Logf("duplicates after: kills %d, stops %d, starts %d, before any change %d; at most %d after one change (%s of member %d at %v, %d members alive, %d requests in flight)",
			perKind["kill"], perKind["stop"], perKind["start"], perChange[0], worst, c.kind, c.member, c.at.Sub(s.started).Round(time.Millisecond), c.alive, c.inFlight)
	}
	t.Logf("order: %d records retried; %d first attempts out of order per key, %d first deliveries out of order among records never retried",
		len(retried), res.orderFirst, res.orderOK)
	if d := os.Getenv("RETRYOPS_STORM_DIR"); d != "" {
		s.dumpDuplicates(filepath.Join(d, s.sc.name, "duplicates.txt"), reqs, changes)
	}
	for _, e := range examples {
		t.Errorf("order violated: %s", e)
	}
	if res.lost > 0 || res.wrong > 0 {
		t.Errorf("%d records lost, %d with the wrong outcome", res.lost, res.wrong)
	}
	if res.dupOK+res.dupDLQ > res.bound {
		t.Errorf("%d redeliveries (%d successful, %d dead letters), more than the bound %d over %d changes",
			res.dupOK+res.dupDLQ, res.dupOK, res.dupDLQ, res.bound, len(changes))
	}
	return res
}

// dumpDuplicates writes, for a post-mortem, the changes and every request of each record
// delivered successfully more than once, with times since the storm's start (wall clock in the
// header, to match the members' logs).
func (s *storm) dumpDuplicates(path string, reqs []*dt.Request, changes []stormChange) {
	var b strings.Builder
	fmt.Fprintf(&b, "storm started %s\n", s.started.UTC().Format(time.RFC3339Nano))
	for _, c := range changes {
		fmt.Fprintf(&b, "change %8.3fs %-5s member %d alive %d inFlight %d took %v\n", c.at.Sub(s.started).Seconds(), c.kind, c.member, c.alive, c.inFlight, c.took.Round(time.Millisecond))
	}
	ok := map[string]int{}
	for _, r := range reqs {
		if r.Status/100 == 2 {
			ok[r.Key]++
		}
	}
	for _, r := range reqs {
		if ok[r.Key] < 2 {
			continue
		}
		i, _ := strconv.Atoi(string(r.Body))
		fmt.Fprintf(&b, "dup %s i=%d kind=%s at %8.3fs status %d attempt %d from %s\n", r.Key, i, s.sc.kind(i), r.At.Sub(s.started).Seconds(), r.Status, r.Attempt, r.DeliveredFrom)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		s.t.Logf("writing %s: %v", path, err)
	}
}

func countDup(m map[string]int) int {
	n := 0
	for _, v := range m {
		if v > 1 {
			n++
		}
	}
	return n
}

// readyz returns the status of a member's /readyz, or 0 when it does not answer.
func readyz(addr string) int {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// scrape returns the sum of the samples of metric name (whose labels contain every label of
// match, e.g. `kind="dead_letter"`) on a member's /metrics, or -1 when it does not answer.
func scrape(addr, name string, match ...string) float64 {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		all := true
		for _, m := range match {
			all = all && strings.Contains(rest, m)
		}
		if !all {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err == nil {
			sum += f
		}
	}
	return sum
}

// scrapeLines returns the /metrics lines of the named metrics.
func scrapeLines(addr string, names ...string) []string {
	cl := http.Client{Timeout: time.Second}
	resp, err := cl.Get("http://" + addr + "/metrics")
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		for _, n := range names {
			if strings.HasPrefix(sc.Text(), n) {
				out = append(out, sc.Text())
			}
		}
	}
	return out
}

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestRebalanceStorm: three dispatcher processes in one group over 12 partitions (source and each
// retry tier), 50,000 records in Ordered mode, 19% failing once (503 on the first attempt, so they
// go through the first retry tier) and 1% permanently (400, dead-lettered); the sink answers in
// 7 ms, and 9 "slow" records (about one in 10,000, on different keys) in 4 s, more than the 3 s drain timeout, so that a change that
// moves their partition abandons them. For the whole run a member is killed (SIGKILL), started,
// or stopped (SIGTERM) and restarted every 1.5-3 s, keeping at least one alive. Asserts: every record ends delivered or dead-lettered as its kind says, none
// lost; duplicates (successful redeliveries and duplicate dead letters) within the bound derived in
// storm.finish; per key, first attempts arrive in sequence order, and so do the first successful
// deliveries of records that never went through a retry tier; no member exits unasked or
// overstays a SIGTERM.
//
// RETRYOPS_STORM_RECORDS overrides the number of records (default 50,000, the issue's);
// RETRYOPS_STORM_DIR keeps the members' logs.
func TestRebalanceStorm(t *testing.T) {
	sc := stormConfig{
		name:           "storm",
		records:        envInt("RETRYOPS_STORM_RECORDS", 50000),
		keys:           1000,
		partitions:     12,
		members:        3,
		maxInFlight:    32,
		maxUncommitted: 64,
		drainTimeout:   3 * time.Second,
		churnMin:       1500 * time.Millisecond,
		churnMax:       3 * time.Second,
		deadline:       240 * time.Second, // generous: it takes 95-135 s on 2 cores
		sinkDelay:      7 * time.Millisecond,
		slowEvery:      10000,
		slowDelay:      4 * time.Second,
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := newStorm(t, sc)
	s.startAll()
	s.churn(seed)
	s.waitAccounted(sc.deadline)
	s.stopAll()
	s.finish()
}

// TestStormBrokerFaults: the storm harness (10,000 records, three members, churn) on a
// three-broker kfake while the brokers misbehave: fetch errors on four source partitions
// (UNKNOWN_SERVER_ERROR) and on a retry tier (NOT_LEADER_OR_FOLLOWER) for 3 s, the leaders of
// four source partitions and a tier partition moved to another broker, then (churn paused) every
// produce to the dead letter topic failing with TOPIC_AUTHORIZATION_FAILED until a member reports
// a stuck dead letter, and 2 s more. Asserts: each fault was hit; a member reported the stuck
// dead letter on /readyz (503), retryops_dispatcher_stuck_dead_letters > 0 and
// retryops_dispatcher_produce_errors_total{kind="dead_letter"} > 0; once the fault is removed
// every member is ready again with no stuck dead letter, by itself; and the storm's checks
// (nothing lost, duplicates bounded, order).
func TestStormBrokerFaults(t *testing.T) {
	sc := stormConfig{
		name:           "faults",
		records:        envInt("RETRYOPS_FAULT_RECORDS", 10000),
		keys:           500,
		partitions:     12,
		brokers:        3,
		members:        3,
		maxInFlight:    32,
		maxUncommitted: 64,
		drainTimeout:   3 * time.Second,
		churnMin:       1500 * time.Millisecond,
		churnMax:       3 * time.Second,
		deadline:       60 * time.Second,
		sinkDelay:      5 * time.Millisecond,
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	s := newStorm(t, sc)
	tiers := s.cfg.Topics.Retries.Names()
	s.startAll()
	s.churn(seed)
	progress := func(frac float64) func() bool {
		return func() bool { return len(s.missing()) <= int(float64(sc.records)*(1-frac)) }
	}

	// Fetch errors and leader changes while the storm runs.
	dt.Eventually(t, 30*time.Second, progress(0.05), "5%% of the records accounted for")
	fetchFault := s.c.Fault(
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: s.src, Partitions: []int32{0, 1, 2, 3}, Err: kerr.UnknownServerError, Count: -1},
		kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: tiers[0], Err: kerr.NotLeaderForPartition, Count: -1},
	)
	s.moveLeaders([]int32{4, 5, 6, 7})
	faultAt := time.Now()
	dt.Eventually(t, 10*time.Second, func() bool { return fetchFault.Hits() > 0 && time.Since(faultAt) > 3*time.Second }, "fetch faults hit")
	fetchFault.Remove()
	t.Logf("fetch faults: %d requests failed in %v; leaders of %s partitions 4-7 moved", fetchFault.Hits(), time.Since(faultAt).Round(time.Millisecond), s.src)

	// Dead letters that cannot be written: churn paused so that the stuck member stays up.
	s.pauseChurn(true)
	dlqFault := s.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: s.dlq, Err: kerr.TopicAuthorizationFailed, Count: -1})
	dlqAt := time.Now()
	var stuck *stormMember
	var stuckGauge, dlqErrs float64
	dt.Eventually(t, 30*time.Second, func() bool {
		s.mu.Lock()
		alive, _ := s.aliveLocked()
		s.mu.Unlock()
		for _, m := range alive {
			if readyz(m.health) == http.StatusServiceUnavailable {
				g := scrape(m.metrics, metrics.StuckDeadLetters)
				e := scrape(m.metrics, metrics.ProduceErrorsTotal, `kind="`+metrics.KindDeadLetter+`"`)
				if g > 0 && e > 0 {
					stuck, stuckGauge, dlqErrs = m, g, e
					return true
				}
			}
		}
		return false
	}, "a member reports a stuck dead letter on /readyz and in its metrics")
	reported := time.Since(dlqAt)
	// Hold the fault 2 s more: the produce errors go on.
	hold := time.Now()
	dt.Eventually(t, 5*time.Second, func() bool { return time.Since(hold) > 2*time.Second }, "holding the fault")
	errsLater := scrape(stuck.metrics, metrics.ProduceErrorsTotal, `kind="`+metrics.KindDeadLetter+`"`)
	dlqFault.Remove()
	cleared := time.Now()
	t.Logf("dead letter produce fault: member %d not ready with %v stuck dead letters and %v dead-letter produce errors %v after the fault began (%v 2 s later); %d produce requests failed",
		stuck.id, stuckGauge, dlqErrs, reported.Round(time.Millisecond), errsLater, dlqFault.Hits())

	// Recovery by itself: every live member ready, nothing stuck.
	dt.Eventually(t, 45*time.Second, func() bool {
		s.mu.Lock()
		alive, _ := s.aliveLocked()
		s.mu.Unlock()
		for _, m := range alive {
			if readyz(m.health) != http.StatusOK || scrape(m.metrics, metrics.StuckDeadLetters) != 0 {
				return false
			}
		}
		return true
	}, "every member ready again, no stuck dead letter, after the fault cleared")
	t.Logf("recovered %v after the fault cleared", time.Since(cleared).Round(time.Millisecond))
	s.pauseChurn(false)
	s.waitAccounted(sc.deadline)
	s.stopAll()
	s.finish()
	// The leader moves were clean: no client saw its fetch position reset (see moveLeaders).
	if n := s.logCount("lost records"); n > 0 {
		t.Errorf("%d fetch errors report lost records after the leader moves", n)
	}
}

// moveLeaders moves the leaders of source partitions to the next broker, as a clean leader
// election does. kfake bumps the partition's leader epoch, and a consumer then validates its
// position (KIP-320, OffsetForLeaderEpoch). kfake answers that request with an end offset of 0
// for the old epoch while the partition holds no batch written in the new one, which franz-go
// takes for a log truncated to offset 0 ("lost records; ... reset to offset 0") and rewinds the
// partition below the group's committed offset: the dispatchers then deliver every record of it
// again. A real broker answers the old epoch's true end offset. So the validation requests wait
// until a marker record (value "marker", dead-lettered by the sink's 400) has been written to
// every moved partition in the new epoch, which makes kfake's answer right.
func (s *storm) moveLeaders(parts []int32) {
	s.t.Helper()
	written := make(chan struct{})
	s.c.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kmsg.Request) (kmsg.Response, error, bool) {
		s.c.SleepControl(func() { <-written })
		return nil, nil, false
	})
	for _, p := range parts {
		to := (s.c.LeaderFor(s.src, p) + 1) % int32(s.sc.brokers)
		if err := s.c.MoveTopicPartition(s.src, p, to); err != nil {
			close(written)
			s.t.Fatalf("moving %s/%d to broker %d: %v", s.src, p, to, err)
		}
	}
	cl := dt.Client(s.t, s.c, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var recs []*kgo.Record
	for _, p := range parts {
		recs = append(recs, &kgo.Record{Topic: s.src, Partition: p, Key: []byte("marker"), Value: []byte("marker")})
	}
	dt.Produce(s.t, cl, recs...)
	close(written)
}

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
	pol := &v1.RetryPolicySpec{MaxAttempts: 2, Backoff: v1.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)}}
	cfg := dt.Config(nil, group, src, dlq, pol, sink.URL)
	topics := map[string]int32{src: 4, dlq: 1}
	for _, tn := range cfg.Topics.Retries.Names() {
		topics[tn] = 4
	}
	c := dt.Cluster(t, topics)
	cfg.Kafka.BootstrapServers = c.ListenAddrs()
	cfg.Delivery.Ordering = v1.OrderingUnordered
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
		select {
		case <-p.done:
		case <-time.After(2 * grace):
			t.Fatalf("round %s: the dispatcher still runs %v after SIGTERM", name, 2*grace)
		}
		took := time.Since(sigAt)
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
// maxUncommittedRecords finished records wait for their commit (internal/dispatcher/doc.go: "a
// crash redelivers at most maxInFlight + maxUncommittedRecords records"). One dispatcher, Ordered,
// 4 partitions, maxInFlight 4, maxUncommittedRecords 8; every commit fails until the test removes
// the fault. Asserts that the sink saw at most maxInFlight + maxUncommittedRecords successful
// deliveries while no commit could succeed, then that everything is delivered once the commits
// work again.
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
