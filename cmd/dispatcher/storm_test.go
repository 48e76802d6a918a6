package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/config"
	dt "github.com/retryops/retry-operator/sdk/dispatcher/dispatchertest"
	"github.com/retryops/retry-operator/sdk/headers"
	"github.com/retryops/retry-operator/sdk/policy"
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
	pol := &policy.Spec{
		MaxAttempts: 3,
		Backoff:     policy.Backoff{InitialDelay: dt.D(100 * time.Millisecond), Multiplier: "2", MaxDelay: dt.D(time.Second)},
		Classification: &policy.Classification{DefaultAction: "DeadLetter", Rules: []policy.ClassificationRule{
			{Name: "transient", Action: policy.ActionRetry, HTTPStatuses: []policy.HTTPStatusMatch{"500-599"}},
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
	s.cfg.Delivery.Ordering = config.OrderingOrdered
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
