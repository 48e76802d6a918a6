package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/sdk/circuitstate"
	"github.com/retryops/retry-operator/sdk/config"
	"github.com/retryops/retry-operator/sdk/metrics"
	"github.com/retryops/retry-operator/sdk/retry"
)

// Options configures an Engine.
type Options struct {
	// Config is the validated configuration (config.Load).
	Config *config.Config
	// Handler delivers records.
	Handler Handler
	// BatchHandler, when set and the config has delivery.batch, delivers records in batches
	// (batch.go); Handler still delivers what goes alone (nothing today but a panic's record).
	BatchHandler BatchHandler
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil uses a new registry (Engine.Registry).
	Registerer prometheus.Registerer
	// Clock is the source of time for due times, deadlines and the circuit breaker, and runs every
	// timer of the engine (the wait for a retry tier's head, the commit interval, the drain
	// timeout, the pause before a failed write is tried again); nil is clock.RealClock. The
	// handler's attemptTimeout and the Kafka clients' own timeouts run on real time.
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
	// OnKafkaProblem, if set, is called with the worst Kafka connection problem (kafkahealth.go)
	// whenever the problems change or one fails again, and with nil once none is left. It is called
	// with a lock held: it must be quick.
	OnKafkaProblem func(*circuitstate.KafkaProblem)
}

// settings are the engine's fixed parameters, worked out at New from the configuration and the
// policy.
type settings struct {
	ordered        bool
	maxInFlight    int
	maxUncommitted int
	maxBuffered    int
	maxRecordBytes int64
	attemptTimeout time.Duration
	drainTimeout   time.Duration
	commitInterval time.Duration
	raHonor        bool          // a sink's Retry-After replaces the backoff delay
	raMax          time.Duration // cap of an honoured Retry-After
	group          string
	pipelineID     string
	dlqTopic       string
	tierNames      []string // the current retry tiers
	drainNames     []string // tiers of earlier policies still holding records (config Topics.Draining)
	tierFor        []int    // tierFor[attempt] for attempt in 2..maxAttempts
	// topicTier maps each consumed topic to its partState.tier: 0 the source, 1.. the current retry
	// tiers, then the draining ones.
	topicTier map[string]int
	// tierWin[t] is the range of backoff delays (no Retry-After) of current tier t (1-based), and
	// tierEarliest[t] the shortest delay any record of tier t waits (0 when unknown): what the
	// look-ahead needs to know that no record behind the last one fetched can be due sooner.
	tierWin      []retry.Window
	tierEarliest []time.Duration
	// lookAheadRecords and lookAheadBytes bound what a retry-tier partition holds from its first
	// unfinished record on; the partition is paused while its window is full.
	lookAheadRecords int
	lookAheadBytes   int64
	// batchMax > 0 delivers in batches of at most batchMax records and batchBytes bytes, each sent
	// at the latest batchWait after its first record was started (batch.go).
	batchMax   int
	batchBytes int64
	batchWait  time.Duration
}

// Engine is the dispatcher loop for one pipeline. See the package documentation for the file that
// holds each part.
type Engine struct {
	settings
	cfg     *config.Config
	pol     *retry.Compiled
	handler Handler
	batchH  BatchHandler
	// batchSizer is batchH when it sizes its requests (BatchSizer).
	batchSizer BatchSizer
	log        *slog.Logger
	m          *metrics.Metrics
	registry   *prometheus.Registry
	clock      clock.Clock
	rng        retry.Rand
	breaker    *retry.Breaker
	onCircuit  func(from, to retry.State)
	onKafka    func(*circuitstate.KafkaProblem)

	// Kafka clients (clients.go).
	cl      *kgo.Client
	dlq     *kgo.Client
	ownDLQ  bool
	solo    *kgo.Client // single-record writes to the source cluster (retry tiers)
	dlqSolo *kgo.Client // single-record writes to the dead-letter cluster

	// Lifecycle.
	started atomic.Bool
	joined  atomic.Bool
	stopped atomic.Bool
	runErr  atomic.Value
	// pollHook, when set (tests), is called at the start of every iteration of the poll loop.
	pollHook func()

	// Fetch errors (poll.go): when each was last logged, and the draining tiers no longer consumed.
	fetchErrMu sync.Mutex
	fetchErrs  map[fetchErrKey]fetchErrLog
	purged     sync.Map

	// Kafka connection problems (kafkahealth.go); kafkaN is len(kafka.problems).
	kafkaMu sync.Mutex
	kafka   kafkaTracker
	kafkaN  atomic.Int32

	// Health (health.go).
	pollBeat atomic.Int64 // UnixNano of the poll loop's last iteration, on the engine's clock
	busyMu   sync.Mutex
	busy     map[*item]time.Time // deliveries under way and their start
	ownedMu  sync.Mutex
	owned    map[tpKey]struct{} // assigned partitions
	lostAll  atomic.Bool        // partitions were lost and none is owned

	// Partitions and scheduling (poll.go, scheduler.go), guarded by mu.
	mu        sync.Mutex
	cond      *sync.Cond // broadcast on every finished or abandoned record while waiters > 0
	waiters   int
	parts     map[tpKey]*partState
	startedTo map[tpKey]int64 // partState.startedTo of partitions forgotten, for redelivery counting
	order     []*partState
	rr        int
	active    int  // dispatched, not finished (delivering or writing)
	slots     int  // dispatched and not yet committed: active + finished records waiting for a commit
	srcDone   int  // finished records of the source topic waiting for their commit: gated by maxUncommitted
	srcHold   bool // the source partitions are paused for back-pressure (scheduler.go)
	buffered  int  // fetched, not yet dispatched
	srcQueued int  // of those, the source topic's (holdSourceLocked)
	ready     int  // buffered in partitions that are not paused: what gates polling
	stopping  bool
	stuck     atomic.Int32 // dead letters whose stripped write failed (changed under mu)
	timerAt   time.Time    // the wake-up timerLoop is set for; zero: none
	pausedCnt int
	// The batch being filled (batch.go): its records are started (counted in active) but not sent.
	pend      []*item
	pendBytes int64
	pendSince time.Time

	// Workers (deliver.go).
	work    chan job
	idle    atomic.Int32
	workers sync.WaitGroup

	// Wake-ups of the loops: pauseLoop, timerLoop, commitLoop, and pollLoop waiting for room.
	pauseKick  chan struct{}
	timerKick  chan struct{}
	commitKick chan struct{}
	roomKick   chan struct{}
	aloneMu    sync.Mutex // one write at a time on the too-large path (writeAlone)
	// The committer is woken once per commit, not per finished record: commitPending says a wake-up
	// is already on its way, pressureKicked that the pressure wake-up was sent (both under mu).
	commitPending  bool
	pressureKicked bool
	commitSem      chan struct{} // held by the commit under way

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
	s, err := newSettings(cfg, pol)
	if err != nil {
		return nil, err
	}
	e := &Engine{
		settings:   s,
		cfg:        cfg,
		pol:        pol,
		handler:    o.Handler,
		batchH:     o.BatchHandler,
		log:        o.Logger,
		clock:      o.Clock,
		onCircuit:  o.OnCircuitStateChange,
		onKafka:    o.OnKafkaProblem,
		parts:      map[tpKey]*partState{},
		startedTo:  map[tpKey]int64{},
		fetchErrs:  map[fetchErrKey]fetchErrLog{},
		busy:       map[*item]time.Time{},
		owned:      map[tpKey]struct{}{},
		work:       make(chan job, s.maxInFlight),
		pauseKick:  make(chan struct{}, 1),
		timerKick:  make(chan struct{}, 1),
		commitKick: make(chan struct{}, 1),
		roomKick:   make(chan struct{}, 1),
		commitSem:  make(chan struct{}, 1),
	}
	e.cond = sync.NewCond(&e.mu)
	if e.batchH == nil {
		e.batchMax = 0
	}
	if bs, ok := e.batchH.(BatchSizer); ok {
		e.batchSizer = bs
	}
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

	reg := o.Registerer
	if reg == nil {
		e.registry = prometheus.NewRegistry()
		reg = e.registry
	}
	if e.m, err = metrics.New(reg, cfg.PipelineLabel(), pol.MaxAttempts()); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if b := pol.Policy().CircuitBreaker; b != nil {
		if e.breaker, err = retry.NewBreaker(*b, e.clock, retry.OnStateChange(e.circuitChanged)); err != nil {
			return nil, err
		}
	}
	// Before the clients: the group's first assignment (onAssigned) may come as soon as they exist.
	e.deliverCtx, e.deliverCancel = context.WithCancel(context.Background())
	e.produceCtx, e.produceCancel = context.WithCancel(context.Background())
	if err := e.newClients(o); err != nil {
		e.deliverCancel()
		e.produceCancel()
		return nil, err
	}
	return e, nil
}

// newSettings works out the engine's parameters, with the defaults of what the configuration
// leaves unset, and maps every delivery attempt to its retry tier.
func newSettings(cfg *config.Config, pol *retry.Compiled) (settings, error) {
	p := pol.Policy()
	s := settings{
		ordered:        cfg.Delivery.Ordering != config.OrderingUnordered,
		maxInFlight:    int(cfg.Delivery.MaxInFlight),
		maxUncommitted: int(cfg.Delivery.UncommittedLimit()),
		maxBuffered:    int(cfg.Delivery.MaxBufferedRecords),
		maxRecordBytes: cfg.MaxRecordBytes,
		attemptTimeout: p.AttemptTimeout,
		drainTimeout:   config.Dur(cfg.DrainTimeout, config.DefaultDrainTimeout),
		commitInterval: config.Dur(cfg.CommitInterval, config.DefaultCommitInterval),
		raHonor:        p.RetryAfter.Honor,
		raMax:          p.RetryAfter.MaxDelay,
		group:          cfg.ConsumerGroup,
		pipelineID:     cfg.PipelineID(),
		dlqTopic:       cfg.Topics.DeadLetter,
		topicTier:      map[string]int{cfg.Topics.Source: 0},
		tierFor:        make([]int, pol.MaxAttempts()+1),
	}
	if s.maxInFlight < 1 {
		s.maxInFlight = config.DefaultMaxInFlight
	}
	if s.maxUncommitted < 1 {
		s.maxUncommitted = max(1000, 4*s.maxInFlight)
	}
	if s.maxBuffered < 1 {
		s.maxBuffered = max(1000, 4*s.maxInFlight)
	}
	if s.maxRecordBytes < 1 {
		s.maxRecordBytes = config.DefaultMaxRecordBytes
	}
	if s.raMax == 0 {
		s.raMax = p.Backoff.MaxDelay
	}
	s.raMax = min(s.raMax, retry.MaxRetryAfter)
	for i, t := range cfg.Topics.Retries {
		s.topicTier[t.Name] = i + 1
		s.tierNames = append(s.tierNames, t.Name)
	}
	for a := int32(2); a <= pol.MaxAttempts(); a++ {
		idx, ok := cfg.Topics.Retries.For(a)
		if !ok {
			return settings{}, fmt.Errorf("no retry tier holds delivery attempt %d", a)
		}
		s.tierFor[a] = idx
	}
	for i, name := range cfg.Topics.Draining {
		s.topicTier[name] = len(cfg.Topics.Retries) + 1 + i
		s.drainNames = append(s.drainNames, name)
	}
	n := len(cfg.Topics.Retries) + 1
	s.tierWin = make([]retry.Window, n)
	s.tierEarliest = make([]time.Duration, n, n+len(s.drainNames))
	seen := make([]bool, n)
	for a := int32(2); a <= pol.MaxAttempts(); a++ {
		t := s.tierFor[a] + 1
		if w, ok := pol.Window(a - 1); ok {
			if !seen[t] {
				s.tierWin[t] = w
			}
			s.tierWin[t].Earliest = min(s.tierWin[t].Earliest, w.Earliest)
			s.tierWin[t].Latest = max(s.tierWin[t].Latest, w.Latest)
			seen[t] = true
		}
	}
	// A Retry-After shorter than every tier's delays goes to the tier with the shortest, and may be
	// fetched only when a record of that tier would be: Retry-After is a lower bound, and the
	// backoff's shortest delay is then the upper one.
	for t := 1; t < n; t++ {
		if seen[t] {
			s.tierEarliest[t] = s.tierWin[t].Earliest
		}
	}
	for range s.drainNames { // delays unknown: maybe due at once
		s.tierEarliest = append(s.tierEarliest, 0)
	}
	s.batchMax, s.batchBytes, s.batchWait = batchSettings(cfg.Delivery.Batch)
	s.lookAheadRecords = s.maxBuffered
	s.lookAheadBytes = max(minLookAheadBytes, 4*s.maxRecordBytes)
	return s, nil
}

// minLookAheadBytes is the least a retry-tier partition may hold in its look-ahead window.
const minLookAheadBytes = 16 << 20

// retryTier returns the tier (an index of tierNames) a record waits in before delivery attempt a,
// delay from now. A backoff delay goes to the attempt's tier. A delay from a sink's Retry-After goes
// to the attempt's tier when that tier's backoff delays cover it; else to the tier with the longest
// shortest delay not above it (the tier whose delays cover it, or the one closest below), or, when
// it is shorter than every tier's delays, to the tier with the shortest. So a tier's records stay
// roughly in due order, and a long Retry-After does not hold up the records behind it.
func (s *settings) retryTier(a int32, delay time.Duration, fromRetryAfter bool) int {
	t := s.tierFor[a]
	if !fromRetryAfter {
		return t
	}
	if w := s.tierWin[t+1]; w.Earliest <= delay && delay <= w.Latest {
		return t
	}
	below, lowest := -1, -1
	for i := 1; i < len(s.tierWin); i++ {
		w := s.tierWin[i]
		if w.Latest == 0 {
			continue // a tier no attempt uses
		}
		if w.Earliest <= delay && (below < 0 || w.Earliest > s.tierWin[below].Earliest) {
			below = i
		}
		if lowest < 0 || w.Earliest < s.tierWin[lowest].Earliest {
			lowest = i
		}
	}
	switch {
	case below > 0:
		return below - 1
	case lowest > 0:
		return lowest - 1
	}
	return t
}

// maxAttempts is the policy's number of deliveries in all.
func (s *settings) maxAttempts() int32 { return int32(len(s.tierFor) - 1) }

// Registry is the registry the metrics went to when Options.Registerer was nil.
func (e *Engine) Registry() *prometheus.Registry { return e.registry }

// Client is the consumer's franz-go client (for tests and diagnostics).
func (e *Engine) Client() *kgo.Client { return e.cl }

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
	for _, loop := range []func(context.Context){e.commitLoop, e.pauseLoop, e.timerLoop} {
		wg.Go(func() { loop(bg) })
	}

	err := e.pollLoop(ctx)
	if err != nil {
		e.runErr.Store(err)
		e.log.Error("Consuming failed", "error", err)
	}

	e.shutdown()
	cancelBG()
	wg.Wait()
	e.log.Info("Dispatcher stopped")
	return err
}

// sleep waits d on the engine's clock; it reports false when ctx ended first.
func (e *Engine) sleep(ctx context.Context, d time.Duration) bool {
	t := e.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// stoppedTimer returns a timer of the engine's clock that is not running, for a loop to Reset.
func (e *Engine) stoppedTimer() clock.Timer {
	t := e.clock.NewTimer(time.Hour)
	stopTimer(t)
	return t
}

// stopTimer stops t and drops a tick it sent that nobody received (a fake clock's timer keeps one,
// a real one does not), so that a Reset starts afresh.
func stopTimer(t clock.Timer) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
}
