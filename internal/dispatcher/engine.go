// Package dispatcher is the data plane of retry-operator: a Kafka consumer that reads a pipeline's
// source topic and retry tiers, delivers each record to a Handler (the HTTP sink of the dispatcher
// binary, or the user's function in library mode, pkg/retryloop), classifies failures with the
// retry core, and writes each failed record to the retry tier of its next attempt or to the dead
// letter topic. An offset is committed only once its record has finished: delivered, dropped, or
// written (and acknowledged) to a retry tier or the dead letter topic.
//
// # How records flow
//
// One poll loop fetches from every assigned partition and appends the records to per-partition
// queues. A scheduler, run under one lock after every poll, completion and timer, starts deliveries
// from the queue heads on a pool of workers: one record at a time per partition in Ordered mode,
// up to delivery.maxInFlight in all. A retry-tier record is delivered only once its due time
// (header retryops.due) has come: while the head of a tier partition is not due, the partition's
// fetching is paused (franz-go PauseFetchPartitions), resumed shortly before the head is due, and a
// timer runs the scheduler at the due time, so nothing sleeps, nothing is skipped or reordered, and
// the source topic keeps flowing.
// With a circuit breaker, every partition is paused while the breaker is open.
//
// Back-pressure: at most delivery.maxInFlight deliveries run at once, and at most
// delivery.maxUncommittedRecords finished records wait for their commit (no delivery starts while
// they do). Otherwise records wait in the partition queues; once the queues of
// the partitions that are not paused hold delivery.maxBufferedRecords, the poll loop stops polling,
// and franz-go stops fetching as soon as its one buffered fetch per broker is full. (Pausing for
// back-pressure instead would discard franz-go's buffered fetch and make the resumed partition wait
// for the fetch under way; not polling keeps the data and resumes at once.)
//
// # Commits
//
// Offsets are committed per partition up to the lowest unfinished record, by one committer: every
// commitInterval, or at once when half of maxUncommittedRecords wait. So a crash redelivers at most
// maxInFlight + maxUncommittedRecords records. Rebalances are blocked while a poll's records are being queued (BlockRebalanceOnPoll);
// a revoked partition stops dispatching, waits up to drainTimeout for its deliveries, commits what
// finished and is dropped. A stop (context cancelled) does the same for every partition and leaves
// the group.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"k8s.io/utils/clock"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/dispatcher/config"
	"github.com/retryops/retry-operator/internal/dispatcher/headers"
	"github.com/retryops/retry-operator/internal/dispatcher/metrics"
	"github.com/retryops/retry-operator/internal/retry"
)

// Options configures an Engine.
type Options struct {
	// Config is the validated configuration (config.Load).
	Config *config.Config
	// Handler delivers records.
	Handler Handler
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil uses a new registry (Engine.Registry).
	Registerer prometheus.Registerer
	// Clock is the source of time for due times, deadlines and the circuit breaker; nil is the
	// system clock. Timers always run on real time.
	Clock clock.Clock
	// Rand is the random source of jitter; nil uses math/rand/v2. It is guarded by a lock.
	Rand retry.Rand
	// KafkaOptions are appended to the consumer client's options (tests, tuning).
	KafkaOptions []kgo.Opt
	// DeadLetterKafkaOptions are appended to the dead-letter client's options when the config has
	// a separate deadLetterKafka connection.
	DeadLetterKafkaOptions []kgo.Opt
	// OnCircuitStateChange, if set, is called on every breaker transition (with the breaker's lock
	// held: it must be quick).
	OnCircuitStateChange func(from, to retry.State)
}

// Fetch tuning. A resumed partition is fetched only once the fetch under way returns, which takes
// up to fetchMaxWait when no data arrives; so a retry-tier partition is resumed resumeLead before
// its head record falls due.
const (
	fetchMaxWait = 500 * time.Millisecond
	resumeLead   = 2 * fetchMaxWait
)

type tpKey struct {
	topic     string
	partition int32
}

// partState is the dispatcher's view of one assigned partition.
type partState struct {
	tpKey
	tier int // 0: source topic; i > 0: retry tier i-1

	items []*item // fetched records, in offset order; items[:head] are finished
	head  int     // first unfinished
	next  int     // first not yet dispatched

	goneFlag atomic.Bool // gone, readable without the lock
	inFlight int         // dispatched, not finished
	held     int         // dispatched and not yet committed (or abandoned)
	popped   int         // finished records popped from items, waiting for their commit
	paused   bool        // desired fetch state
	revoking bool        // no more dispatching
	gone     bool        // no longer ours: completions are ignored

	commitOffset int64 // next offset to commit; -1 until something finished
	commitEpoch  int32
	committed    int64 // last committed offset; -1 for none
	hw           int64
}

func (ps *partState) queued() int { return len(ps.items) - ps.next }

// Engine is the dispatcher loop for one pipeline.
type Engine struct {
	cfg       *config.Config
	pol       *retry.Compiled
	raHonor   bool
	raMax     time.Duration
	handler   Handler
	log       *slog.Logger
	m         *metrics.Metrics
	registry  *prometheus.Registry
	clock     clock.Clock
	rng       retry.Rand
	breaker   *retry.Breaker
	onCircuit func(from, to retry.State)

	ordered        bool
	maxInFlight    int
	maxUncommitted int
	maxBuffered    int
	maxRecordBytes int64
	attemptTimeout time.Duration
	drainTimeout   time.Duration
	commitInterval time.Duration
	group          string
	pipelineID     string
	dlqTopic       string
	tierNames      []string
	tierFor        []int // tierFor[attempt] for attempt in 2..maxAttempts
	topicTier      map[string]int

	cl      *kgo.Client
	dlq     *kgo.Client
	ownDLQ  bool
	started atomic.Bool
	joined  atomic.Bool
	stopped atomic.Bool
	runErr  atomic.Value

	mu        sync.Mutex
	cond      *sync.Cond
	waiters   int
	parts     map[tpKey]*partState
	order     []*partState
	rr        int
	active    int // dispatched, not finished (delivering or writing)
	slots     int // dispatched and not yet committed: active + finished records waiting for a commit
	buffered  int // fetched, not yet dispatched
	ready     int // buffered in partitions that are not paused: what gates polling
	stopping  bool
	abandon   bool
	timer     *time.Timer
	timerAt   time.Time
	pausedCnt int

	work chan *item
	idle atomic.Int32
	// handoff: while a worker finishes a record under the lock, the first record dispatched goes
	// back to that worker instead of waking another one.
	handoffOK bool
	handoff   *item
	workers   sync.WaitGroup

	pauseKick  chan struct{}
	commitKick chan struct{}
	roomKick   chan struct{}
	aloneMu    sync.Mutex // one dead letter at a time on the too-large path
	// The committer is woken once per commit, not per finished record: commitPending says a wake-up
	// is already on its way, pressureKicked that the pressure wake-up was sent (both under mu).
	commitPending  bool
	pressureKicked bool
	commitMu       sync.Mutex

	deliverCtx    context.Context
	deliverCancel context.CancelFunc
	produceCtx    context.Context
	produceCancel context.CancelFunc
}

type lockedRand struct {
	mu sync.Mutex
	r  retry.Rand
}

func (l *lockedRand) Int63n(n int64) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Int63n(n)
}

// New builds an Engine: it compiles the policy and creates the Kafka clients (which connect
// lazily). Call Run to consume.
func New(o Options) (*Engine, error) {
	cfg := o.Config
	if cfg == nil || o.Handler == nil {
		return nil, errors.New("dispatcher: Config and Handler are required")
	}
	pol, err := cfg.Compile()
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:            cfg,
		pol:            pol,
		handler:        o.Handler,
		log:            o.Logger,
		clock:          o.Clock,
		onCircuit:      o.OnCircuitStateChange,
		ordered:        cfg.Delivery.Ordering != v1.OrderingUnordered,
		maxInFlight:    int(cfg.Delivery.MaxInFlight),
		maxUncommitted: int(cfg.Delivery.UncommittedLimit()),
		maxBuffered:    int(cfg.Delivery.MaxBufferedRecords),
		maxRecordBytes: cfg.MaxRecordBytes,
		drainTimeout:   config.Dur(cfg.DrainTimeout, config.DefaultDrainTimeout),
		commitInterval: config.Dur(cfg.CommitInterval, config.DefaultCommitInterval),
		group:          cfg.ConsumerGroup,
		pipelineID:     cfg.PipelineID(),
		dlqTopic:       cfg.Topics.DeadLetter,
		parts:          map[tpKey]*partState{},
		pauseKick:      make(chan struct{}, 1),
		commitKick:     make(chan struct{}, 1),
		roomKick:       make(chan struct{}, 1),
	}
	if e.maxInFlight < 1 {
		e.maxInFlight = config.DefaultMaxInFlight
	}
	if e.maxUncommitted < 1 {
		e.maxUncommitted = max(1000, 4*e.maxInFlight)
	}
	if e.maxBuffered < 1 {
		e.maxBuffered = max(1000, 4*e.maxInFlight)
	}
	if e.maxRecordBytes < 1 {
		e.maxRecordBytes = config.DefaultMaxRecordBytes
	}
	e.work = make(chan *item, e.maxInFlight)
	e.cond = sync.NewCond(&e.mu)
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	e.log = e.log.With("pipeline", e.pipelineID, "consumerGroup", e.group)
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if o.Rand != nil {
		e.rng = &lockedRand{r: o.Rand}
	}
	p := pol.Policy()
	e.attemptTimeout = p.AttemptTimeout
	e.raHonor = p.RetryAfter.Honor
	e.raMax = p.RetryAfter.MaxDelay
	if e.raMax == 0 {
		e.raMax = p.Backoff.MaxDelay
	}

	reg := o.Registerer
	if reg == nil {
		e.registry = prometheus.NewRegistry()
		reg = e.registry
	}
	if e.m, err = metrics.New(reg, cfg.PipelineLabel(), pol.MaxAttempts()); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if p.CircuitBreaker != nil {
		e.breaker, err = retry.NewBreaker(*p.CircuitBreaker, e.clock, retry.OnStateChange(e.circuitChanged))
		if err != nil {
			return nil, err
		}
	}

	// Topics and tiers.
	e.topicTier = map[string]int{cfg.Topics.Source: 0}
	topics := []string{cfg.Topics.Source}
	for i, t := range cfg.Topics.Retries {
		e.topicTier[t.Name] = i + 1
		e.tierNames = append(e.tierNames, t.Name)
		topics = append(topics, t.Name)
	}
	e.tierFor = make([]int, pol.MaxAttempts()+1)
	for a := int32(2); a <= pol.MaxAttempts(); a++ {
		idx, ok := cfg.Topics.Retries.For(a)
		if !ok {
			return nil, fmt.Errorf("no retry tier holds delivery attempt %d", a)
		}
		e.tierFor[a] = idx
	}

	conn, err := ConnectionOptions(&cfg.Kafka)
	if err != nil {
		return nil, err
	}
	common := []kgo.Opt{
		kgo.WithLogger(kgoLogger{e.log.With("component", "kafka")}),
		kgo.ProducerLinger(0),
	}
	// franz-go's default batch size fits Kafka's default max.message.bytes. Only a maxRecordBytes
	// raised above the default (whose topics must then accept more) makes batches larger.
	if cfg.MaxRecordBytes > config.DefaultMaxRecordBytes {
		common = append(common, kgo.ProducerBatchMaxBytes(int32(min(cfg.MaxRecordBytes+64<<10, 1<<30))))
	}
	opts := append(append([]kgo.Opt{}, conn...), common...)
	opts = append(opts,
		kgo.ConsumerGroup(cfg.ConsumerGroup),
		kgo.ConsumeTopics(topics...),
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(fetchMaxWait),
		kgo.OnPartitionsAssigned(e.onAssigned),
		kgo.OnPartitionsRevoked(e.onRevoked),
		kgo.OnPartitionsLost(e.onLost),
	)
	if d := cfg.Group.SessionTimeout; d != nil && d.Duration > 0 {
		opts = append(opts, kgo.SessionTimeout(d.Duration))
	}
	if d := cfg.Group.HeartbeatInterval; d != nil && d.Duration > 0 {
		opts = append(opts, kgo.HeartbeatInterval(d.Duration))
	}
	if d := cfg.Group.RebalanceTimeout; d != nil && d.Duration > 0 {
		opts = append(opts, kgo.RebalanceTimeout(d.Duration))
	}
	if cfg.Group.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.Group.InstanceID))
	}
	opts = append(opts, o.KafkaOptions...)
	if e.cl, err = kgo.NewClient(opts...); err != nil {
		return nil, fmt.Errorf("creating the kafka client: %w", err)
	}
	e.dlq = e.cl
	if cfg.DeadLetterKafka != nil {
		dconn, err := ConnectionOptions(cfg.DeadLetterKafka)
		if err != nil {
			e.cl.Close()
			return nil, err
		}
		dopts := append(append(append([]kgo.Opt{}, dconn...), common...), o.DeadLetterKafkaOptions...)
		if e.dlq, err = kgo.NewClient(dopts...); err != nil {
			e.cl.Close()
			return nil, fmt.Errorf("creating the dead-letter kafka client: %w", err)
		}
		e.ownDLQ = true
	}
	e.deliverCtx, e.deliverCancel = context.WithCancel(context.Background())
	e.produceCtx, e.produceCancel = context.WithCancel(context.Background())
	return e, nil
}

// Registry is the registry the metrics went to when Options.Registerer was nil.
func (e *Engine) Registry() *prometheus.Registry { return e.registry }

// Client is the consumer's franz-go client (for tests and diagnostics).
func (e *Engine) Client() *kgo.Client { return e.cl }

// Live reports whether the engine is healthy: false once Run failed.
func (e *Engine) Live() bool { return e.runErr.Load() == nil }

// Ready reports whether the engine joined its group and is not stopping.
func (e *Engine) Ready() bool { return e.started.Load() && e.joined.Load() && !e.stopped.Load() }

func (e *Engine) circuitChanged(from, to retry.State) {
	v := metrics.CircuitClosed
	switch to {
	case retry.StateHalfOpen:
		v = metrics.CircuitHalfOpen
	case retry.StateOpen:
		v = metrics.CircuitOpen
	}
	e.m.CircuitState.Set(float64(v))
	e.log.Info("Circuit breaker changed state", "from", string(from), "to", string(to))
	if e.onCircuit != nil {
		e.onCircuit(from, to)
	}
}

// Run consumes until ctx is cancelled, then stops gracefully: it stops fetching, lets in-flight
// deliveries finish for up to drainTimeout (abandoning the rest, uncommitted), commits what
// finished and leaves the group. Run may be called once.
func (e *Engine) Run(ctx context.Context) error {
	if !e.started.CompareAndSwap(false, true) {
		return errors.New("dispatcher: Run called twice")
	}
	e.log.Info("Starting dispatcher", "source", e.cfg.Topics.Source, "retryTiers", e.tierNames,
		"deadLetter", e.dlqTopic, "ordering", string(e.cfg.Delivery.Ordering), "maxInFlight", e.maxInFlight)
	bg, cancelBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.commitLoop(bg) }()
	go func() { defer wg.Done(); e.pauseLoop(bg) }()

	e.pollLoop(ctx)

	e.shutdown()
	cancelBG()
	wg.Wait()
	e.log.Info("Dispatcher stopped")
	return nil
}

// waitRoom waits until the partitions that are not paused hold fewer than maxBuffered records.
func (e *Engine) waitRoom(ctx context.Context) {
	for {
		e.mu.Lock()
		room := e.ready < e.maxBuffered
		e.mu.Unlock()
		if room {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-e.roomKick:
		}
	}
}

func (e *Engine) pollLoop(ctx context.Context) {
	for {
		e.waitRoom(ctx)
		if ctx.Err() != nil {
			return
		}
		// Everything buffered (at most one fetch per broker): polling a limited number of records
		// would drain the buffer partition by partition and starve the others.
		fetches := e.cl.PollFetches(ctx)
		if ctx.Err() != nil || fetches.IsClientClosed() {
			e.cl.AllowRebalance()
			return
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			e.log.Warn("Fetch error", "topic", topic, "partition", partition, "error", err)
		})
		e.mu.Lock()
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil && len(fp.Records) == 0 {
				return
			}
			ps := e.partLocked(fp.Topic, fp.Partition)
			if ps == nil {
				return
			}
			if fp.HighWatermark > ps.hw {
				ps.hw = fp.HighWatermark
			}
			for _, r := range fp.Records {
				ps.items = append(ps.items, newItem(r, ps, e.maxRecordBytes))
			}
			e.buffered += len(fp.Records)
			e.lagLocked(ps)
		})
		e.scheduleLocked()
		e.mu.Unlock()
		e.cl.AllowRebalance()
	}
}

// partLocked returns the state of a partition, creating it on first sight.
func (e *Engine) partLocked(topic string, partition int32) *partState {
	k := tpKey{topic, partition}
	if ps := e.parts[k]; ps != nil {
		return ps
	}
	tier, ok := e.topicTier[topic]
	if !ok {
		return nil
	}
	ps := &partState{tpKey: k, tier: tier, commitOffset: -1, committed: -1}
	e.parts[k] = ps
	e.order = append(e.order, ps)
	return ps
}

// scheduleLocked starts every delivery that may start now, recomputes which partitions should be
// paused, and arms the timer for the next due time.
func (e *Engine) scheduleLocked() {
	if e.stopping {
		return
	}
	now := e.clock.Now()
	var wake time.Time
	sinkBlocked, breakerOpen := false, false
	if e.breaker != nil {
		if until, open := e.breaker.OpenUntil(); open {
			sinkBlocked, breakerOpen = true, true
			wake = until
		}
	}
	n := len(e.order)
	if n > 0 {
		e.rr = (e.rr + 1) % n
	}
	for k := 0; k < n && e.canStartLocked(); k++ {
		ps := e.order[(e.rr+k)%n]
		for ps.next < len(ps.items) && e.canStartLocked() && !ps.revoking {
			if e.ordered && ps.inFlight > 0 {
				break
			}
			it := ps.items[ps.next]
			if it.pre == nil {
				if !it.due.IsZero() && it.due.After(now) {
					wake = earliest(wake, it.due)
					if lead := it.due.Add(-resumeLead); lead.After(now) { // to resume the partition's fetching
						wake = earliest(wake, lead)
					}
					break
				}
				if e.pol.Expired(it.srcTime, now) {
					it.pre = &failure{reason: headers.ReasonDeadlineExceeded, errorType: headers.ErrorTypeDeadlineExceeded,
						message: "the record is past its deadline (" + e.pol.Policy().Deadline.String() + " after " + headers.FormatTime(it.srcTime) + ")"}
				} else {
					if sinkBlocked {
						break
					}
					if e.breaker != nil {
						if !e.breaker.Allow() {
							sinkBlocked = true
							break
						}
						it.allowed = true
					}
				}
			}
			ps.next++
			ps.inFlight++
			ps.held++
			e.active++
			e.slots++
			e.buffered--
			e.dispatchLocked(it)
		}
	}

	changed := false
	ready := 0
	for _, ps := range e.order {
		want := e.wantPausedLocked(ps, now, breakerOpen)
		if want != ps.paused {
			ps.paused = want
			changed = true
			if want {
				e.pausedCnt++
			} else {
				e.pausedCnt--
			}
		}
		if !ps.paused {
			ready += ps.queued()
		}
	}
	if changed {
		kick(e.pauseKick)
	}
	e.ready = ready
	if ready < e.maxBuffered {
		kick(e.roomKick)
	}
	e.armTimerLocked(wake, now)
	e.gaugesLocked()
}

// canStartLocked reports whether another delivery may start: fewer than maxInFlight under way and
// fewer than maxUncommitted finished records waiting for their commit.
func (e *Engine) canStartLocked() bool {
	return e.active < e.maxInFlight && e.slots-e.active < e.maxUncommitted
}

func (e *Engine) gaugesLocked() {
	e.m.InFlight.Set(float64(e.active))
	e.m.Uncommitted.Set(float64(e.slots - e.active))
	e.m.Buffered.Set(float64(e.buffered))
	e.m.PausedPartitions.Set(float64(e.pausedCnt))
}

func (e *Engine) wantPausedLocked(ps *partState, now time.Time, breakerOpen bool) bool {
	if ps.revoking || ps.gone {
		return false
	}
	if breakerOpen {
		return true
	}
	if ps.tier > 0 && ps.queued() > 0 {
		// Paused while the head is not due; resumed resumeLead before it is, so that the records
		// behind it are fetched by the time they fall due.
		if it := ps.items[ps.next]; it.pre == nil && it.due.Sub(now) > resumeLead {
			return true
		}
	}
	return false
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// armTimerLocked makes sure scheduling runs again at `at` (zero: no need).
func (e *Engine) armTimerLocked(at, now time.Time) {
	if at.IsZero() {
		return
	}
	if !e.timerAt.IsZero() && !e.timerAt.After(at) {
		return // an earlier (or equal) wake-up is already armed
	}
	d := at.Sub(now)
	if d < 0 {
		d = 0
	}
	e.timerAt = at
	if e.timer == nil {
		e.timer = time.AfterFunc(d, e.onTimer)
	} else {
		e.timer.Reset(d)
	}
}

func (e *Engine) onTimer() {
	e.mu.Lock()
	e.timerAt = time.Time{}
	e.scheduleLocked()
	e.mu.Unlock()
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// dispatchLocked hands an item to a worker, starting one when none is idle.
func (e *Engine) dispatchLocked(it *item) {
	if e.handoffOK && e.handoff == nil {
		e.handoff = it
		return
	}
	if e.idle.Add(-1) < 0 {
		e.idle.Add(1)
		e.workers.Add(1)
		go e.worker()
	}
	e.work <- it // never blocks: the channel holds maxInFlight items
}

func (e *Engine) worker() {
	defer e.workers.Done()
	for it := range e.work {
		for it != nil {
			it = e.process(it)
		}
		e.idle.Add(1)
	}
}

// pauseLoop reconciles franz-go's paused partitions with the desired state.
func (e *Engine) pauseLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.pauseKick:
		}
		want := map[string][]int32{}
		e.mu.Lock()
		for _, ps := range e.order {
			if ps.paused {
				want[ps.topic] = append(want[ps.topic], ps.partition)
			}
		}
		e.mu.Unlock()
		current := e.cl.PauseFetchPartitions(nil)
		toPause, toResume := diffPartitions(want, current), diffPartitions(current, want)
		if len(toPause) > 0 {
			e.cl.PauseFetchPartitions(toPause)
		}
		if len(toResume) > 0 {
			e.cl.ResumeFetchPartitions(toResume)
		}
	}
}

// diffPartitions returns the partitions of a that are not in b.
func diffPartitions(a, b map[string][]int32) map[string][]int32 {
	var out map[string][]int32
	for t, ps := range a {
		for _, p := range ps {
			found := false
			for _, q := range b[t] {
				if p == q {
					found = true
					break
				}
			}
			if !found {
				if out == nil {
					out = map[string][]int32{}
				}
				out[t] = append(out[t], p)
			}
		}
	}
	return out
}

// process delivers one item and decides what follows. It returns the next item for this worker,
// when finishing this one dispatched another.
func (e *Engine) process(it *item) *item {
	if it.pre != nil {
		it.pre.at = e.clock.Now()
		e.deadLetter(it, it.pre, it.attempt-1)
		return nil
	}
	start := e.clock.Now()
	if !it.due.IsZero() {
		e.m.RetryLateness.Observe(start.Sub(it.due).Seconds())
	}
	it.d = Delivery{Record: it.view, Consumed: it.rec, Attempt: it.attempt, IdempotencyKey: it.idempotencyKey(), FirstFailure: it.firstFailure}
	ctx, cancel := e.deliverCtx, context.CancelFunc(nil)
	if e.attemptTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, e.attemptTimeout)
	}
	res := e.handler.Deliver(ctx, &it.d)
	if cancel != nil {
		cancel()
	}
	now := e.clock.Now()
	e.m.DeliveryDuration.Observe(now.Sub(start).Seconds())
	if res.Success {
		e.m.Attempt(it.attempt, true)
		if it.allowed {
			e.breaker.Record(true)
		}
		return e.finishIn(it, metrics.OutcomeSuccess, true)
	}
	if e.deliverCtx.Err() != nil || it.part.goneFlag.Load() {
		// A failure while abandoning in-flight work (a stop past its drain timeout, a revocation):
		// likely caused by the cancellation itself, so neither committed nor retried.
		if it.allowed {
			e.breaker.Record(true)
		}
		e.abandonItem(it)
		return nil
	}
	e.m.Attempt(it.attempt, false)

	o := res.Outcome
	f := &failure{at: now, message: o.Message, httpStatus: o.HTTPStatus}
	if o.Transport != retry.TransportNone {
		f.httpStatus = 0
	}
	if res.Undeliverable {
		if it.allowed {
			e.breaker.Record(true) // the sink is fine; the record is not
		}
		f.reason = headers.ReasonUndeliverable
		f.errorType = o.ErrorType
		if f.errorType == "" {
			f.errorType = headers.ErrorTypeUndeliverable
		}
		e.deadLetter(it, f, it.attempt)
		return nil
	}
	dec := e.decide(it, res, now)
	if it.allowed {
		e.breaker.Record(!unhealthy(o, dec))
	}
	f.rule = dec.Rule
	f.errorType = dec.ErrorType
	if f.errorType == "" && f.httpStatus != 0 {
		f.errorType = "HTTP" + itoa(f.httpStatus)
	}
	if f.message == "" {
		f.message = f.errorType
	}
	switch dec.Action {
	case retry.ActionRetry:
		e.retry(it, f, dec.Due)
	case retry.ActionDeadLetter:
		f.reason = string(dec.Reason)
		e.deadLetter(it, f, it.attempt)
	default: // Drop
		return e.finishIn(it, metrics.OutcomeDropped, true)
	}
	return nil
}

// unhealthy says whether a failure counts against the circuit breaker: the sink did not answer,
// answered 408, 429 or 5xx, or the failure was classified retriable. A deliberate rejection
// (a 4xx the policy dead-letters) shows a healthy sink.
func unhealthy(o retry.Outcome, d retry.Decision) bool {
	if o.Transport != retry.TransportNone || o.HTTPStatus >= 500 || o.HTTPStatus == 408 || o.HTTPStatus == 429 {
		return true
	}
	return d.Action == retry.ActionRetry || d.Reason == retry.ReasonMaxRetriesExceeded
}

// decide applies the policy, or a handler's forced action.
func (e *Engine) decide(it *item, res Result, now time.Time) retry.Decision {
	o := res.Outcome
	switch res.Force {
	case retry.ActionDeadLetter:
		return retry.Decision{Action: retry.ActionDeadLetter, Reason: retry.ReasonNonRetriable, ErrorType: errorTypeOf(o), MaxAttempts: e.pol.MaxAttempts()}
	case retry.ActionRetry:
		d := retry.Decision{Action: retry.ActionRetry, ErrorType: errorTypeOf(o), MaxAttempts: e.pol.MaxAttempts()}
		if it.attempt >= d.MaxAttempts {
			d.Action, d.Reason = retry.ActionDeadLetter, retry.ReasonMaxRetriesExceeded
			return d
		}
		d.Delay, _ = e.pol.Sample(it.attempt, e.rng)
		if e.raHonor && o.RetryAfter > 0 {
			d.Delay, d.FromRetryAfter = min(o.RetryAfter, e.raMax), true
		}
		d.Due = now.Add(d.Delay)
		if dl, ok := e.pol.DeadlineOf(it.srcTime); ok && d.Due.After(dl) {
			d.Action, d.Reason, d.Delay, d.Due = retry.ActionDeadLetter, retry.ReasonDeadlineExceeded, 0, time.Time{}
		}
		return d
	default:
		return e.pol.Decide(o, it.attempt, it.srcTime, now, e.rng)
	}
}

func errorTypeOf(o retry.Outcome) string {
	if o.Transport != retry.TransportNone {
		return o.Transport.ErrorType()
	}
	return o.ErrorType
}

// retry writes the record to the tier of its next attempt; it finishes once acknowledged.
func (e *Engine) retry(it *item, f *failure, due time.Time) {
	tier := e.tierFor[it.attempt+1]
	rec := it.retryRecord(e.tierNames[tier], f, due)
	e.cl.Produce(e.produceCtx, rec, func(_ *kgo.Record, err error) {
		if err == nil {
			e.finish(it, metrics.OutcomeRetried)
			return
		}
		if e.produceCtx.Err() != nil {
			e.abandonItem(it)
			return
		}
		e.m.RetryProduceErr.Inc()
		e.log.Error("Writing to a retry tier failed; dead-lettering the record", "topic", rec.Topic,
			"originalTopic", it.view.Topic, "originalPartition", it.view.Partition, "originalOffset", it.view.Offset, "error", err)
		g := *f
		g.reason = headers.ReasonUndeliverable
		g.errorType = headers.ErrorTypeRetryProduceFailed
		g.message = "writing to retry tier " + rec.Topic + " failed: " + err.Error() + " (last failure: " + f.errorType + ": " + f.message + ")"
		e.deadLetter(it, &g, it.attempt)
	})
}

// deadLetter writes the record to the dead letter topic; it finishes once acknowledged. A failed
// write is retried every second until it succeeds or the engine gives up on in-flight work.
func (e *Engine) deadLetter(it *item, f *failure, attempts int32) {
	rec := it.deadLetterRecord(e.dlqTopic, e.group, e.pipelineID, attempts, f)
	e.produceDLQ(it, rec, f.reason)
}

func (e *Engine) produceDLQ(it *item, rec *kgo.Record, reason string) {
	e.dlq.Produce(e.produceCtx, rec, func(_ *kgo.Record, err error) { e.deadLettered(it, rec, reason, err, false) })
}

// deadLettered handles the outcome of a dead-letter write. alone says the record was written on
// its own (not in a batch shared with other records).
func (e *Engine) deadLettered(it *item, rec *kgo.Record, reason string, err error, alone bool) {
	if err == nil {
		e.m.DeadLetter(reason)
		e.finish(it, metrics.OutcomeDeadLettered)
		return
	}
	if e.produceCtx.Err() != nil {
		e.abandonItem(it)
		return
	}
	e.m.DLQProduceErr.Inc()
	if (errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)) && rec.Value != nil {
		if !alone {
			// The whole batch was rejected: write this record on its own (one at a time) to learn
			// whether it is the one too large.
			go func() {
				e.aloneMu.Lock()
				err := e.dlq.ProduceSync(e.produceCtx, rec).FirstErr()
				e.aloneMu.Unlock()
				e.deadLettered(it, rec, reason, err, true)
			}()
			return
		}
		// The broker will never take it: keep the key, headers and context, drop the value.
		e.log.Error("A dead letter is too large for the dead letter topic; writing it without its value", "topic", rec.Topic,
			"originalTopic", it.view.Topic, "originalPartition", it.view.Partition, "originalOffset", it.view.Offset, "valueBytes", len(rec.Value))
		small := *rec
		small.Headers = append(slices.Clip(rec.Headers), hdr(headers.ValueOmitted, strconv.Itoa(len(rec.Value))))
		small.Value = nil
		e.produceDLQ(it, &small, reason)
		return
	}
	e.log.Error("Writing a dead letter failed; retrying in 1s", "topic", rec.Topic,
		"originalTopic", it.view.Topic, "originalPartition", it.view.Partition, "originalOffset", it.view.Offset, "error", err)
	time.AfterFunc(time.Second, func() {
		if e.produceCtx.Err() != nil {
			e.abandonItem(it)
			return
		}
		e.produceDLQ(it, rec, reason)
	})
}

// finish marks an item finished, advances its partition's commit point and schedules.
func (e *Engine) finish(it *item, outcome string) { e.finishIn(it, outcome, false) }

// finishIn is finish; from a worker (inWorker) it returns the first record it dispatched, for the
// worker to process next.
func (e *Engine) finishIn(it *item, outcome string, inWorker bool) *item {
	switch outcome {
	case metrics.OutcomeSuccess:
		e.m.Success.Inc()
	case metrics.OutcomeRetried:
		e.m.Retried.Inc()
	case metrics.OutcomeDeadLettered:
		e.m.DeadLettered.Inc()
	case metrics.OutcomeDropped:
		e.m.Dropped.Inc()
	}
	e.mu.Lock()
	ps := it.part
	it.done = true
	ps.inFlight--
	e.active--
	advanced := false
	if !ps.gone { // a forgotten partition released its slots already
		advanced = e.advanceLocked(ps)
	}
	e.handoffOK = inWorker
	e.scheduleLocked()
	next := e.handoff
	e.handoffOK, e.handoff = false, nil
	if e.waiters > 0 {
		e.cond.Broadcast()
	}
	wake := false
	if advanced {
		switch {
		case !e.commitPending:
			e.commitPending, wake = true, true
		case !e.pressureKicked && e.pressureLocked():
			e.pressureKicked, wake = true, true
		}
	}
	e.mu.Unlock()
	if wake {
		kick(e.commitKick)
	}
	return next
}

// abandonItem releases an item's slot without finishing it: its offset is never committed.
func (e *Engine) abandonItem(it *item) {
	e.mu.Lock()
	it.abandoned = true
	ps := it.part
	ps.inFlight--
	e.active--
	if !ps.gone {
		ps.held--
		e.slots--
	}
	e.gaugesLocked()
	if e.waiters > 0 {
		e.cond.Broadcast()
	}
	e.mu.Unlock()
}

// advanceLocked pops finished items from the head of a partition and moves its commit point.
func (e *Engine) advanceLocked(ps *partState) bool {
	moved := false
	for ps.head < ps.next && ps.items[ps.head].done {
		r := ps.items[ps.head].rec
		ps.commitOffset, ps.commitEpoch = r.Offset+1, r.LeaderEpoch
		ps.items[ps.head] = nil
		ps.head++
		ps.popped++
		moved = true
	}
	if !moved {
		return false
	}
	if ps.head < len(ps.items) {
		// The first unfinished record may sit past a gap (compaction, transaction markers).
		ps.commitOffset = ps.items[ps.head].rec.Offset
	}
	switch {
	case ps.head == len(ps.items):
		ps.items, ps.head, ps.next = ps.items[:0], 0, 0
	case ps.head >= 1024 && ps.head*2 >= len(ps.items):
		k := copy(ps.items, ps.items[ps.head:])
		clear(ps.items[k:])
		ps.items = ps.items[:k]
		ps.next -= ps.head
		ps.head = 0
	}
	return ps.commitOffset > ps.committed
}

type commitEntry struct {
	ps      *partState
	offset  int64
	release int // slots the commit releases: the records popped before it was collected
}

// collectLocked returns the offsets to commit for the given partitions (all when nil) and updates
// the lag gauges.
func (e *Engine) collectLocked(only []*partState) (map[string]map[int32]kgo.EpochOffset, []commitEntry) {
	var offsets map[string]map[int32]kgo.EpochOffset
	var entries []commitEntry
	parts := only
	if parts == nil {
		parts = e.order
	}
	for _, ps := range parts {
		e.lagLocked(ps)
		if ps.commitOffset < 0 || ps.commitOffset <= ps.committed {
			continue
		}
		if offsets == nil {
			offsets = map[string]map[int32]kgo.EpochOffset{}
		}
		if offsets[ps.topic] == nil {
			offsets[ps.topic] = map[int32]kgo.EpochOffset{}
		}
		offsets[ps.topic][ps.partition] = kgo.EpochOffset{Epoch: ps.commitEpoch, Offset: ps.commitOffset}
		entries = append(entries, commitEntry{ps, ps.commitOffset, ps.popped})
	}
	return offsets, entries
}

// lagLocked updates the lag gauge of a partition: high watermark minus the next offset to commit.
func (e *Engine) lagLocked(ps *partState) {
	next := ps.commitOffset
	if ps.head < len(ps.items) {
		next = ps.items[ps.head].rec.Offset
	}
	if next >= 0 && ps.hw > 0 {
		e.m.Lag(ps.topic, ps.partition, max(ps.hw-next, 0))
	}
}

// commit commits offsets synchronously and records what was committed.
func (e *Engine) commit(ctx context.Context, offsets map[string]map[int32]kgo.EpochOffset, entries []commitEntry) error {
	if len(offsets) == 0 {
		return nil
	}
	var cerr error
	e.cl.CommitOffsetsSync(ctx, offsets, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			cerr = err
			return
		}
		failed := map[tpKey]bool{}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if perr := kerr.ErrorForCode(p.ErrorCode); perr != nil {
					failed[tpKey{t.Topic, p.Partition}] = true
					cerr = perr
				}
			}
		}
		e.mu.Lock()
		for _, c := range entries {
			if failed[c.ps.tpKey] {
				continue
			}
			if c.offset > c.ps.committed {
				c.ps.committed = c.offset
			}
			if !c.ps.gone {
				c.ps.popped -= c.release
				c.ps.held -= c.release
				e.slots -= c.release
			}
		}
		e.scheduleLocked() // released slots may start deliveries
		e.mu.Unlock()
	})
	if cerr != nil {
		e.m.CommitErrors.Inc()
	}
	return cerr
}

// commitLoop commits what finished, one commit at a time: at most every commitInterval, but at
// once when half of maxUncommitted finished records wait for their commit (so that the interval
// never throttles deliveries).
func (e *Engine) commitLoop(ctx context.Context) {
	var last time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.commitKick:
		}
		for e.commitInterval > 0 {
			wait := e.commitInterval - time.Since(last)
			if wait <= 0 || e.commitPressure() {
				break
			}
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			case <-e.commitKick: // the slots came under pressure
				timer.Stop()
			}
		}
		last = time.Now()
		e.commitMu.Lock()
		e.mu.Lock()
		e.commitPending, e.pressureKicked = false, false
		offsets, entries := e.collectLocked(nil)
		e.mu.Unlock()
		err := e.commit(ctx, offsets, entries)
		e.commitMu.Unlock()
		if len(entries) > 0 {
			e.log.Debug("Committed offsets", "partitions", len(entries), "took", time.Since(last), "error", err)
		}
		if err != nil && ctx.Err() == nil {
			e.log.Warn("Committing offsets failed; retrying", "error", err)
			time.AfterFunc(500*time.Millisecond, func() { kick(e.commitKick) })
		}
	}
}

// commitPressure reports whether half of maxUncommitted finished records wait for their commit.
func (e *Engine) commitPressure() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pressureLocked()
}

func (e *Engine) pressureLocked() bool { return 2*(e.slots-e.active) >= e.maxUncommitted }

func (e *Engine) onAssigned(_ context.Context, _ *kgo.Client, assigned map[string][]int32) {
	if !e.joined.Swap(true) {
		e.m.Ready.Set(1)
		e.log.Info("Joined the consumer group")
	}
	if len(assigned) > 0 {
		e.log.Info("Partitions assigned", "partitions", assigned)
	}
}

// onRevoked stops dispatching from the revoked partitions, waits up to drainTimeout for their
// deliveries, commits what finished and forgets them.
func (e *Engine) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if len(revoked) == 0 {
		return
	}
	e.mu.Lock()
	parts := e.partsLocked(revoked)
	for _, ps := range parts {
		ps.revoking = true
	}
	e.waitLocked(func() bool {
		for _, ps := range parts {
			if ps.inFlight > 0 {
				return false
			}
		}
		return true
	}, e.drainTimeout)
	e.mu.Unlock()

	e.commitMu.Lock()
	e.mu.Lock()
	offsets, entries := e.collectLocked(parts)
	e.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := e.commit(cctx, offsets, entries)
	cancel()
	e.commitMu.Unlock()
	if err != nil {
		e.log.Warn("Committing revoked partitions failed", "error", err)
	}
	e.forget(parts)
	e.log.Info("Partitions revoked", "partitions", revoked)
}

// onLost forgets partitions that are no longer ours without committing.
func (e *Engine) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if len(lost) == 0 {
		return
	}
	e.mu.Lock()
	parts := e.partsLocked(lost)
	e.mu.Unlock()
	e.forget(parts)
	e.log.Warn("Partitions lost", "partitions", lost)
}

func (e *Engine) partsLocked(tps map[string][]int32) []*partState {
	var parts []*partState
	for t, ps := range tps {
		for _, p := range ps {
			if s := e.parts[tpKey{t, p}]; s != nil {
				parts = append(parts, s)
			}
		}
	}
	return parts
}

// forget drops partitions: their unfinished records are abandoned (redelivered by the next owner).
func (e *Engine) forget(parts []*partState) {
	e.mu.Lock()
	for _, ps := range parts {
		if ps.gone {
			continue
		}
		ps.gone = true
		ps.goneFlag.Store(true)
		e.slots -= ps.held // in-flight records of a forgotten partition are abandoned
		ps.held = 0
		if ps.paused {
			ps.paused = false
			e.pausedCnt--
		}
		e.buffered -= ps.queued()
		delete(e.parts, ps.tpKey)
		e.m.DeleteLag(ps.topic, ps.partition)
	}
	kept := e.order[:0]
	for _, ps := range e.order {
		if !ps.gone {
			kept = append(kept, ps)
		}
	}
	clear(e.order[len(kept):])
	e.order = kept
	e.scheduleLocked()
	e.gaugesLocked()
	e.mu.Unlock()
	kick(e.pauseKick)
}

// waitLocked waits (e.mu held) until done() or the timeout elapses; it reports done().
func (e *Engine) waitLocked(done func() bool, timeout time.Duration) bool {
	if done() {
		return true
	}
	expired := false
	t := time.AfterFunc(timeout, func() {
		e.mu.Lock()
		expired = true
		e.cond.Broadcast()
		e.mu.Unlock()
	})
	defer t.Stop()
	e.waiters++
	defer func() { e.waiters-- }()
	for !done() && !expired {
		e.cond.Wait()
	}
	return done()
}

// shutdown stops dispatching, drains in-flight work for up to drainTimeout, abandons the rest,
// commits what finished and leaves the group.
func (e *Engine) shutdown() {
	e.stopped.Store(true)
	e.m.Ready.Set(0)
	e.mu.Lock()
	e.stopping = true
	if e.timer != nil {
		e.timer.Stop()
	}
	inflight := e.active
	drained := e.waitLocked(func() bool { return e.active == 0 }, e.drainTimeout)
	left := e.active
	e.mu.Unlock()
	if !drained {
		e.log.Warn("Abandoning in-flight deliveries after the drain timeout; they will be delivered again", "inFlight", left, "drainTimeout", e.drainTimeout)
	}
	// Abandon whatever is left: deliveries get their context cancelled, pending writes fail.
	e.deliverCancel()
	e.produceCancel()
	e.mu.Lock()
	e.waitLocked(func() bool { return e.active == 0 }, 5*time.Second)
	e.mu.Unlock()

	e.commitMu.Lock()
	e.mu.Lock()
	offsets, entries := e.collectLocked(nil)
	parts := append([]*partState(nil), e.order...)
	e.mu.Unlock()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if err := e.commit(cctx, offsets, entries); err != nil {
		e.log.Error("Final commit failed; the uncommitted records will be delivered again", "error", err)
	}
	cancel()
	e.commitMu.Unlock()
	e.forget(parts)
	e.log.Info("Stopped consuming", "drainedInFlight", inflight-left, "abandoned", left)

	e.cl.CloseAllowingRebalance()
	if e.ownDLQ {
		e.dlq.Close()
	}
	e.mu.Lock()
	close(e.work)
	e.mu.Unlock()
	// Workers stuck in a handler that ignores its context are left behind rather than waited for.
	done := make(chan struct{})
	go func() { e.workers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		e.log.Warn("Some deliveries did not return after their context was cancelled")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
