package deadletters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Defaults of Options.
const (
	// DefaultProgressEvery is how many dead letters may be considered between two progress reports.
	DefaultProgressEvery = 500
	// DefaultProgressInterval is the longest time between two progress reports while records flow.
	DefaultProgressInterval = 2 * time.Second
	// DefaultStateBatch is how many decisions of Resolve and Ignore are written at once.
	DefaultStateBatch = 500
	// MaxReplayBatch bounds the records of one replay produce (and so the duplicates a restart can
	// cause); a batch is also at most a tenth of a second of the rate.
	MaxReplayBatch = 100
)

// ErrNoTarget is wrapped by a Target function's error when a dead letter has nowhere to go: the
// dead letter is skipped (SkipNoTarget; SkipOtherPipeline when it wraps ErrOtherPipelineRecord too).
// Any other error of the function stops the run.
var ErrNoTarget = errors.New("no replay target")

// Target is where Replay produces one dead letter.
type Target struct {
	// Topic is the topic to produce to (a pipeline's first retry tier, or the topic the action names).
	Topic string
	// Conn is the connection to its cluster.
	Conn kafka.Connection
	// Pipeline is "<namespace>/<name>" of the pipeline whose tier Topic is, "" for a topic the action
	// names: the replay carries it as retryops.pipeline, which that pipeline's dispatcher requires.
	Pipeline string
}

// Options are the inputs of Run.
type Options struct {
	// Spec is the action; Ref names it in every decision recorded.
	Spec retryv1alpha1.DeadLetterActionSpec
	Ref  ActionRef
	// Topic is the dead letter topic and Conn the connection to its cluster, which also holds its
	// state topic (StateTopic(Topic)).
	Topic string
	Conn  kafka.Connection
	// Kafka gives the admin (ListOffsets, DeleteRecordsBefore), the scans and the produces.
	Kafka kafka.ClientFactory
	// Snapshot is the end offset of every partition of Topic, captured by the caller when the action
	// started (Admin.ListOffsets) and kept in status.snapshot: dead letters at or beyond it are never
	// considered, so a replayed record that returns to the queue is not picked up again.
	Snapshot map[int32]int64
	// Resume is the progress recorded by an earlier run of the same action (FromStatus), nil on the
	// first run: its checkpoint is where the scan restarts, its counts are carried on.
	Resume *Progress
	// Target resolves where Replay sends a dead letter (required for Replay). The usual function reads
	// the entry's Pipeline ("<namespace>/<name>") and returns that pipeline's first retry tier; with
	// spec.target set, the named pipeline's tier or the named topic.
	Target func(ctx context.Context, e *Entry) (Target, error)
	// Holders is the topic ledger (required for Replay): Run refuses, before it writes anything for
	// a dead letter, a target a replay never writes into (a dead-letter topic, a record of
	// decisions, another pipeline's tier; ErrTargetRefused), whatever Target gave.
	Holders TopicHolders
	// Clock paces the replay and the progress reports (the real clock when nil).
	Clock clock.Clock
	// OnProgress, when set, is called with the progress at most every ProgressEvery dead letters or
	// ProgressInterval (defaults DefaultProgressEvery, DefaultProgressInterval), always at a point
	// where the checkpoint is durable, and once at the end. It is called on Run's goroutine.
	OnProgress       func(Progress)
	ProgressEvery    int
	ProgressInterval time.Duration
}

func (o *Options) clock() clock.Clock {
	if o.Clock == nil {
		return clock.RealClock{}
	}
	return o.Clock
}

// pending is a decision waiting in the batch for its write.
type pending struct {
	id     ID
	state  State
	record kafka.ProduceRecord // Replay
	target Target              // Replay
}

type run struct {
	o       *Options
	m       *Matcher
	admin   kafka.Admin
	topicID string // the dead letter topic's ID when the run started ("" when the brokers give none)
	states  *States
	prog    Progress
	scanned map[int32]int64 // per partition: one past the last dead letter considered
	batch   []pending
	batchN  int
	lim     limiter
	dryRun  bool
	checked map[string]error // Replay: the targets checked (checkedTarget)

	sinceReport  int
	lastReport   time.Time
	possibleDups int   // records that the run this one resumes may have left in flight
	maxRecords   int64 // 0: no limit
	full         bool  // maxRecords reached
	err          error
	cancel       context.CancelFunc
}

// Run executes one action over the snapshot, from the checkpoint, and returns its final progress.
// On an error (Kafka unreachable, a produce or a state write failing for a reason worth retrying,
// ctx ended) it returns the progress so far, whose checkpoint is durable: running the action again
// with it as Resume goes on from there. A Replay resumed that way may produce again the records of
// the batch in flight when the earlier run stopped (at most MaxReplayBatch); Progress.Duplicates
// counts them (an upper bound: they may not have reached Kafka).
func Run(ctx context.Context, o Options) (Progress, error) {
	r := &run{o: &o, dryRun: o.Spec.Mode == retryv1alpha1.ActionModeDryRun, scanned: map[int32]int64{}}
	if o.Resume != nil {
		r.prog = o.Resume.clone()
	}
	if r.prog.Checkpoint == nil {
		r.prog.Checkpoint = map[int32]int64{}
	}
	var err error
	if r.m, err = Compile(o.Spec.Action, o.Spec.Selector); err != nil {
		return r.prog, fmt.Errorf("selector: %w", err)
	}
	switch o.Spec.Action {
	case retryv1alpha1.DeadLetterReplay, retryv1alpha1.DeadLetterResolve, retryv1alpha1.DeadLetterIgnore, retryv1alpha1.DeadLetterPurge:
	default:
		return r.prog, fmt.Errorf("unknown action %q", o.Spec.Action)
	}
	if len(o.Snapshot) == 0 {
		return r.prog, errors.New("no snapshot: capture the end offsets with Snapshot when the action starts")
	}
	if o.Spec.Action == retryv1alpha1.DeadLetterReplay && (o.Target == nil || o.Holders == nil) {
		return r.prog, errors.New("a Replay needs a Target function and the topic ledger (Holders) to check its targets")
	}
	if o.Spec.MaxRecords != nil {
		r.maxRecords = *o.Spec.MaxRecords
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	rate := retryv1alpha1.DefaultRecordsPerSecond
	if o.Spec.Rate != nil && o.Spec.Rate.RecordsPerSecond > 0 {
		rate = int(o.Spec.Rate.RecordsPerSecond)
	}
	r.lim = limiter{clk: o.clock(), rate: float64(rate)}
	r.batchN = DefaultStateBatch
	if o.Spec.Action == retryv1alpha1.DeadLetterReplay {
		r.batchN = max(1, min(MaxReplayBatch, rate/10))
		if o.Resume != nil && !r.dryRun {
			r.possibleDups = r.batchN
		}
	}
	r.lastReport = o.clock().Now()

	if r.admin, err = o.Kafka.Admin(ctx, o.Conn); err != nil {
		return r.prog, err
	}
	// The topic's ID first: decisions are recorded as made on this incarnation of the topic, and a
	// Purge deletes only while it is still the topic (purge.go).
	if r.topicID, err = TopicID(ctx, r.admin, o.Topic); err != nil {
		return r.prog, err
	}
	offsets, err := r.admin.ListOffsets(ctx, o.Topic)
	if err != nil {
		return r.prog, err
	}
	parts, ok := offsets[o.Topic]
	if !ok {
		return r.prog, kafka.NewError("run action", kafka.KindTopicNotFound, fmt.Errorf("%w: %s", kafka.ErrTopicNotFound, o.Topic), "")
	}
	start := map[int32]int64{}
	for _, p := range parts {
		start[p.Partition] = p.Start
	}
	keep := func(id ID) bool {
		end, ok := o.Snapshot[id.Partition]
		return ok && id.Offset < end && id.Offset >= start[id.Partition]
	}
	if r.states, err = LoadStates(ctx, r.admin, o.Kafka, o.Conn, o.Topic, r.topicID, keep); err != nil {
		return r.prog, fmt.Errorf("load the record of decisions: %w", err)
	}

	ranges := r.ranges(start)
	if o.Spec.Action == retryv1alpha1.DeadLetterPurge {
		err = r.purge(ctx, ranges)
	} else {
		err = r.scan(ctx, ranges)
	}
	if err != nil {
		return r.prog.clone(), err
	}
	r.prog.Complete = true
	r.report(true)
	return r.prog.clone(), nil
}

// ranges returns what is left to consider per partition: [max(checkpoint, start), snapshot end),
// narrowed to the explicit records when the selector names some. A partition with nothing left is
// checkpointed at its end at once.
func (r *run) ranges(start map[int32]int64) map[int32]kafka.OffsetRange {
	explicit := r.m.Records()
	out := map[int32]kafka.OffsetRange{}
	for p, end := range r.o.Snapshot {
		from := max(r.prog.Checkpoint[p], start[p])
		if explicit != nil && r.o.Spec.Action != retryv1alpha1.DeadLetterPurge {
			offs := explicit[p]
			if len(offs) == 0 {
				from = end
			} else {
				from = max(from, offs[0])
				end = min(end, offs[len(offs)-1]+1)
			}
		}
		if from >= end {
			r.prog.Checkpoint[p] = max(r.prog.Checkpoint[p], r.o.Snapshot[p])
			continue
		}
		out[p] = kafka.OffsetRange{From: from, To: end}
	}
	return out
}

// scan runs Replay, Resolve and Ignore.
func (r *run) scan(ctx context.Context, ranges map[int32]kafka.OffsetRange) error {
	if len(ranges) > 0 {
		sctx, cancel := context.WithCancel(ctx)
		r.cancel = cancel
		err := r.o.Kafka.Scan(sctx, r.o.Conn, map[string]map[int32]kafka.OffsetRange{r.o.Topic: ranges}, func(rec kafka.Record) {
			if r.err != nil || r.full {
				return
			}
			if err := r.consider(ctx, rec); err != nil {
				r.err = err
				cancel()
			}
		})
		cancel()
		if r.err != nil {
			return r.err
		}
		if err != nil && !r.full {
			return err
		}
	}
	if err := r.flush(ctx); err != nil {
		return err
	}
	if !r.full {
		for p, end := range r.o.Snapshot {
			r.prog.Checkpoint[p] = max(r.prog.Checkpoint[p], end)
		}
	}
	return nil
}

// consider decides on one dead letter of the scan.
func (r *run) consider(ctx context.Context, rec kafka.Record) error {
	e := parse(rec, false)
	r.scanned[e.Partition] = e.Offset + 1
	r.sinceReport++
	if r.m.MatchEntry(&e) {
		if err := r.decide(ctx, &e); err != nil {
			return err
		}
	}
	if len(r.batch) == 0 {
		r.prog.Checkpoint[e.Partition] = r.scanned[e.Partition]
	}
	if len(r.batch) >= r.batchN {
		if err := r.flush(ctx); err != nil {
			return err
		}
	}
	if r.maxRecords > 0 && r.prog.Done+int64(len(r.batch)) >= r.maxRecords {
		if err := r.flush(ctx); err != nil {
			return err
		}
		r.full = true
		r.cancel()
		return nil
	}
	if r.sinceReport >= r.o.ProgressEvery || r.o.clock().Since(r.lastReport) >= r.o.ProgressInterval {
		// A report carries a durable checkpoint: write what waits first.
		if err := r.flush(ctx); err != nil {
			return err
		}
		r.report(false)
	}
	return nil
}

// decide handles a dead letter that meets every criterion but, perhaps, the state.
func (r *run) decide(ctx context.Context, e *Entry) error {
	st := r.states.Get(e.ID)
	want := map[retryv1alpha1.DeadLetterActionType]retryv1alpha1.DeadLetterState{
		retryv1alpha1.DeadLetterReplay: retryv1alpha1.DeadLetterReplayed, retryv1alpha1.DeadLetterResolve: retryv1alpha1.DeadLetterResolved, retryv1alpha1.DeadLetterIgnore: retryv1alpha1.DeadLetterIgnored,
	}[r.o.Spec.Action]
	r.prog.Matched++
	if !r.dryRun && st.State == want && st.Action.UID != "" && st.Action.UID == r.o.Ref.UID {
		// Decided by this very action before a restart, after its last checkpoint.
		r.prog.Done++
		return nil
	}
	if !r.m.MatchState(st) {
		r.prog.skip(skipReasonFor(st))
		return nil
	}
	p := pending{id: e.ID, state: State{
		State: want, Note: r.o.Spec.Note, RequestedBy: r.o.Spec.RequestedBy, Action: r.o.Ref,
		Time: r.o.clock().Now().UTC(), ReplayCount: st.ReplayCount, TopicID: r.topicID,
	}}
	if r.o.Spec.Action == retryv1alpha1.DeadLetterReplay {
		ok, err := r.replayable(ctx, e, st, &p)
		if err != nil || !ok {
			return err
		}
	}
	if r.dryRun {
		r.prog.Done++
		if len(r.prog.MatchedRecords) < retryv1alpha1.MaxListedRecords {
			r.prog.MatchedRecords = append(r.prog.MatchedRecords, e.ID)
		}
		return nil
	}
	r.batch = append(r.batch, p)
	return nil
}

func skipReasonFor(st State) string {
	switch st.Name() {
	case retryv1alpha1.DeadLetterReplayed:
		return SkipAlreadyReplayed
	case retryv1alpha1.DeadLetterResolved:
		return SkipAlreadyResolved
	case retryv1alpha1.DeadLetterIgnored:
		return SkipAlreadyIgnored
	}
	return SkipPending
}

// flush writes the batch: for Replay, produces it at the rate, then records the states of the
// records acknowledged; for Resolve and Ignore, records the states. On success the checkpoint moves
// to everything considered.
func (r *run) flush(ctx context.Context) error {
	if len(r.batch) == 0 {
		return nil
	}
	ok := make([]bool, len(r.batch))
	if r.o.Spec.Action == retryv1alpha1.DeadLetterReplay {
		if err := r.lim.wait(ctx, len(r.batch)); err != nil {
			return err
		}
		if err := r.produce(ctx, ok); err != nil {
			return err
		}
	} else {
		for i := range ok {
			ok[i] = true
		}
	}
	var updates []StateUpdate
	for i, p := range r.batch {
		if ok[i] {
			updates = append(updates, StateUpdate{ID: p.id, State: p.state})
		}
	}
	if len(updates) > 0 {
		if _, err := WriteStates(ctx, r.o.Kafka, r.o.Conn, r.o.Topic, updates); err != nil {
			return fmt.Errorf("record the decisions: %w", err)
		}
	}
	for _, u := range updates {
		r.states.Set(u.ID, u.State)
		r.prog.Done++
	}
	r.batch = r.batch[:0]
	for p, next := range r.scanned {
		r.prog.Checkpoint[p] = max(r.prog.Checkpoint[p], next)
	}
	return nil
}

// report calls OnProgress with a copy of the progress.
func (r *run) report(final bool) {
	r.sinceReport = 0
	r.lastReport = r.o.clock().Now()
	if r.o.OnProgress != nil {
		p := r.prog.clone()
		p.Complete = final
		r.o.OnProgress(p)
	}
}

// TopicID returns the ID of topic (kafka.Admin.TopicIDs; "" when the brokers give none); a missing
// topic is an error matching kafka.ErrTopicNotFound.
func TopicID(ctx context.Context, admin kafka.Admin, topic string) (string, error) {
	ids, err := admin.TopicIDs(ctx, topic)
	if err != nil {
		return "", err
	}
	id, ok := ids[topic]
	if !ok {
		return "", kafka.NewError("read the topic's ID", kafka.KindTopicNotFound, fmt.Errorf("%w: %s", kafka.ErrTopicNotFound, topic), "")
	}
	return id, nil
}
