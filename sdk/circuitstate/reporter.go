package circuitstate

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/retryops/retry-operator/sdk/retry"
)

// ConfigMapPatcher applies a JSON merge patch (RFC 7396) to a ConfigMap of the pipeline's
// namespace, as fieldManager. The operator's module implements it with client-go
// (github.com/retryops/retry-operator/pkg/kubereport); this module has no Kubernetes client.
type ConfigMapPatcher interface {
	MergePatch(ctx context.Context, name string, patch []byte, fieldManager string) error
}

// FieldManager is the field manager of the consumers' patches.
const FieldManager = "retryops-dispatcher"

// Reporter keeps one pod's entry in the ConfigMap in line with its breaker and its Kafka connection:
// Observe records each breaker transition, ObserveKafka each Kafka problem, and Run writes. It
// writes when the state changes (setting the entry when the breaker leaves Closed or a Kafka problem
// starts or changes reason, removing it when both are gone), every Interval while either persists
// (with the problem's latest message), once at start (removing what an earlier process of the same
// pod may have left), and at the end of Run (removing the entry). A failed write is retried every
// RetryInterval; delivery never waits for it.
type Reporter struct {
	// ConfigMaps patches the ConfigMap's namespace.
	ConfigMaps ConfigMapPatcher
	// ConfigMap is the ConfigMap's name; Pod is this pod's name, the key of its entry.
	ConfigMap, Pod string
	// Interval is how often an entry is repeated while the breaker is not Closed. Defaults to 30s.
	Interval time.Duration
	// RetryInterval is the pause after a failed write. Defaults to min(5s, Interval).
	RetryInterval time.Duration
	// Clock is the clock of the entries' times and of the repeat and retry timers; nil is
	// clock.RealClock.
	Clock clock.Clock
	// Log receives write failures and recoveries; nil discards them.
	Log *slog.Logger

	mu      sync.Mutex
	state   State
	since   time.Time
	kafka   *KafkaProblem
	changed chan struct{}
}

// Observe records a breaker transition. It never blocks, so it can be called with the breaker's
// lock held (dispatcher.Options.OnCircuitStateChange).
func (r *Reporter) Observe(to State) {
	r.init()
	r.mu.Lock()
	if to != r.state {
		r.state, r.since = to, r.Clock.Now()
	}
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// ObserveKafka records the pod's Kafka connection problem, nil when it has none. A problem of the
// same reason only updates the message the next repeat carries; a new reason, a new problem or its
// end is written at once. It never blocks.
func (r *Reporter) ObserveKafka(p *KafkaProblem) {
	r.init()
	var cp *KafkaProblem
	if p != nil {
		cp = &KafkaProblem{Reason: p.Reason, Message: BoundMessage(p.Message), Since: p.Since.UTC()}
	}
	r.mu.Lock()
	changed := (cp == nil) != (r.kafka == nil) || (cp != nil && cp.Reason != r.kafka.Reason)
	r.kafka = cp
	r.mu.Unlock()
	if !changed {
		return
	}
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// init prepares the Reporter on first use; every goroutine that reads r.Clock calls it first.
func (r *Reporter) init() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.changed == nil {
		r.changed = make(chan struct{}, 1)
		r.state = Closed
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
}

// Run writes until ctx ends, then removes the pod's entry (bounded by 5 s).
func (r *Reporter) Run(ctx context.Context) {
	r.init()
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if r.Interval <= 0 {
		r.Interval = 30 * time.Second
	}
	retryAfter := r.RetryInterval
	if retryAfter <= 0 {
		retryAfter = min(5*time.Second, r.Interval)
	}
	var (
		written = false // the last successful write set an entry
		pending = true  // a write is due
		failing = false // the last write failed
		timer   = r.Clock.NewTimer(time.Hour)
	)
	timer.Stop()
	defer func() { timer.Stop() }()
	// rearm replaces the timer, so that a tick the old one sent and nobody received (a fake clock's
	// timer keeps one) is dropped with it.
	rearm := func(d time.Duration) {
		timer.Stop()
		timer = r.Clock.NewTimer(d)
	}
loop:
	for {
		if pending {
			r.mu.Lock()
			state, since, kafka := r.state, r.since, r.kafka
			r.mu.Unlock()
			var entry *Entry
			if state != Closed || kafka != nil {
				entry = &Entry{State: state, Kafka: kafka, ReportedAt: r.Clock.Now().UTC()}
				if state != Closed {
					entry.Since = since.UTC()
				}
			}
			switch err := r.write(ctx, entry); {
			case err != nil && ctx.Err() != nil:
				break loop
			case err != nil:
				if !failing {
					log.Warn("Could not report the circuit breaker state to the operator; retrying",
						"configMap", r.ConfigMap, "state", string(state), "kafkaProblem", kafka != nil, "error", err.Error())
				}
				failing = true
				rearm(retryAfter)
			default:
				if failing {
					log.Info("Reported the circuit breaker state to the operator again", "configMap", r.ConfigMap, "state", string(state))
				}
				failing, pending, written = false, false, entry != nil
				if entry != nil {
					rearm(r.Interval) // the next repeat
				}
			}
		}
		select {
		case <-ctx.Done():
			break loop
		case <-r.changed:
			pending = true
		case <-timer.C():
			// A repeat is due, or a retry: either way the current state is written.
			r.mu.Lock()
			pending = pending || r.state != Closed || r.kafka != nil || written
			r.mu.Unlock()
		}
	}
	r.mu.Lock()
	closed := r.state == Closed && r.kafka == nil
	r.mu.Unlock()
	// Remove what this pod may have left: its entry, or one an earlier process of it left when the
	// first removal never completed.
	if written || !closed || failing || pending {
		cctx, cancel := context.WithTimeout(context.Background(), RemoveTimeout)
		defer cancel()
		if err := r.write(cctx, nil); err != nil {
			log.Warn("Could not remove the circuit breaker report; the operator ignores it once stale",
				"configMap", r.ConfigMap, "error", err.Error())
		}
	}
}

func (r *Reporter) write(ctx context.Context, e *Entry) error {
	return r.ConfigMaps.MergePatch(ctx, r.ConfigMap, MergePatch(r.Pod, e), FieldManager)
}

// OnStateChange is Observe in the shape of dispatcher.Options.OnCircuitStateChange.
func (r *Reporter) OnStateChange(_, to retry.State) { r.Observe(State(to)) }

// RemoveTimeout bounds the removal of a pod's entry when its reporter stops: part of the pod's
// shutdown, which must fit its termination grace period.
const RemoveTimeout = 2 * time.Second

// Start runs Run in the background; stop ends it and waits until the pod's entry is removed (at
// most RemoveTimeout). A nil Reporter starts nothing.
func (r *Reporter) Start() (stop func()) {
	if r == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
