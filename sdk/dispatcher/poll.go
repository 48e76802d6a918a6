package dispatcher

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

type tpKey struct {
	topic     string
	partition int32
}

// partState is the dispatcher's view of one assigned partition: its records (partitionTracker)
// and its fetch state.
type partState struct {
	tpKey
	partitionTracker
	tier int // 0: source topic; i > 0: retry tier i-1

	goneFlag atomic.Bool // gone, readable without the lock
	paused   bool        // desired fetch state
	revoking bool        // no more dispatching
	batched  int         // records in the batch being filled (batch.go)
	stuck    int         // in-flight dead letters that cannot be written (deadletter.go)
	hw       int64       // high watermark seen in the last fetch
	lastTime time.Time   // latest timestamp of the retries fetched (at most now; a Replay's records not counted): a retry tier's look-ahead

	// ctx ends when the partition is forgotten (or every delivery is abandoned at a stop): it is
	// the context of its deliveries; dlqCtx, ending then too (or when pending writes are
	// abandoned at a stop), bounds the waits between its dead-letter writes.
	ctx       context.Context
	dlqCtx    context.Context
	cancelCtx context.CancelFunc
	cancelDLQ context.CancelFunc
}

// cancel ends the partition's contexts.
func (ps *partState) cancel() {
	ps.cancelCtx()
	ps.cancelDLQ()
}

// waitRoom waits until the partitions that are not paused hold fewer than maxBuffered records,
// for pollBeatEvery at most (the loop beats while it waits); it reports whether there is room.
func (e *Engine) waitRoom(ctx context.Context) bool {
	e.mu.Lock()
	room := e.ready < e.maxBuffered
	e.mu.Unlock()
	if room {
		return true
	}
	t := e.clock.NewTimer(pollBeatEvery)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-e.roomKick:
	case <-t.C():
	}
	return false
}

// pollLoop fetches from every assigned partition and queues the records, then schedules. It
// returns when ctx ends, or with an error when the client was closed under it.
func (e *Engine) pollLoop(ctx context.Context) error {
	for {
		e.beat()
		e.kafkaExpire()
		if e.pollHook != nil {
			e.pollHook()
		}
		if !e.waitRoom(ctx) {
			if ended(ctx) {
				return nil
			}
			continue
		}
		// Everything buffered (at most one fetch per broker): polling a limited number of records
		// would drain the buffer partition by partition and starve the others.
		pctx, cancel := e.pollBounded(ctx)
		fetches := e.cl.PollFetches(pctx)
		cancel()
		if ended(ctx) {
			e.cl.AllowRebalance()
			return nil
		}
		if fetches.IsClientClosed() {
			e.cl.AllowRebalance()
			return errors.New("dispatcher: the Kafka client was closed")
		}
		fetches.EachError(e.fetchError)
		e.kafkaFetched(fetches)
		e.mu.Lock()
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			if fp.Err != nil && len(fp.Records) == 0 {
				return
			}
			ps := e.partLocked(fp.Topic, fp.Partition)
			if ps == nil {
				return
			}
			ps.hw = max(ps.hw, fp.HighWatermark)
			now := e.clock.Now()
			for _, r := range fp.Records {
				if r.Offset < ps.startedTo {
					e.m.Redeliveries.Inc()
				}
				it := newItem(r, ps, &e.settings, now)
				ps.add(it)
				// A Replay's record is due when written: only a retry's timestamp, taken when its
				// delay started, bounds when the records behind it come due.
				if !it.replayWrite && r.Timestamp.After(ps.lastTime) {
					ps.lastTime = r.Timestamp
				}
			}
			if ps.lastTime.After(now) {
				ps.lastTime = now // a producer's clock ahead of ours
			}
			e.buffered += len(fp.Records)
			if ps.tier == 0 {
				e.srcQueued += len(fp.Records)
			}
			e.lagLocked(ps)
		})
		e.scheduleLocked()
		e.mu.Unlock()
		e.cl.AllowRebalance()
	}
}

// ended reports whether ctx is done: a stop, not a failure.
func ended(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
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
	ps := &partState{tpKey: k, tier: tier, partitionTracker: newPartitionTracker(tier > 0)}
	ps.startedTo = e.startedTo[k] // what this process started before a revocation
	ps.ctx, ps.cancelCtx = context.WithCancel(e.deliverCtx)
	ps.dlqCtx, ps.cancelDLQ = context.WithCancel(e.produceCtx)
	e.parts[k] = ps
	e.order = append(e.order, ps)
	return ps
}

// lagLocked updates the lag gauge of a partition: high watermark minus the next offset to commit.
func (e *Engine) lagLocked(ps *partState) {
	if next := ps.position(); next >= 0 && ps.hw > 0 {
		e.m.Lag(ps.topic, ps.partition, max(ps.hw-next, 0))
	}
}

// fetchErrorEvery bounds how often one partition's fetch error is logged again.
const fetchErrorEvery = 30 * time.Second

// fetchError handles an error of a poll's partition: a draining retry tier that no longer exists
// (the operator deleted it once drained) is no longer consumed; any other error is logged, at
// most once per fetchErrorEvery per partition and error (franz-go keeps retrying and reports it on
// every poll), with the number of repeats left out.
func (e *Engine) fetchError(topic string, partition int32, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) { // a bounded poll
		return
	}
	if e.topicTier[topic] > len(e.tierNames) && (errors.Is(err, kerr.UnknownTopicID) || errors.Is(err, kerr.UnknownTopicOrPartition)) {
		if _, done := e.purged.LoadOrStore(topic, true); !done {
			e.log.Info("A draining retry tier no longer exists; no longer consuming it", "topic", topic)
			e.cl.PurgeTopicsFromConsuming(topic)
		}
		return
	}
	// The group's errors come here too (topic ""): HookGroupManageError has them.
	if topic != "" && e.kafkaFailed(wherePrefixF+topic, err, true, "topic", topic, "partition", partition) {
		return
	}
	k := fetchErrKey{topic, partition, err.Error()}
	now := e.clock.Now()
	e.fetchErrMu.Lock()
	last, seen := e.fetchErrs[k]
	if seen && now.Sub(last.at) < fetchErrorEvery {
		last.repeats++
		e.fetchErrs[k] = last
		e.fetchErrMu.Unlock()
		return
	}
	if len(e.fetchErrs) > maxFetchErrKeys {
		clear(e.fetchErrs)
	}
	e.fetchErrs[k] = fetchErrLog{at: now}
	e.fetchErrMu.Unlock()
	e.log.Warn("Fetch error", "topic", topic, "partition", partition, "error", err, "repeatsNotLogged", last.repeats)
}

// kafkaFetched clears the fetch problems of the topics records came from.
func (e *Engine) kafkaFetched(fetches kgo.Fetches) {
	if e.kafkaN.Load() == 0 {
		return
	}
	fetched := map[string]bool{}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Err == nil && len(fp.Records) > 0 {
			fetched[wherePrefixF+fp.Topic] = true
		}
	})
	if len(fetched) > 0 {
		e.kafkaOK(func(w string, _ *kafkaProblem) bool { return fetched[w] })
	}
}

// maxFetchErrKeys bounds the fetch errors remembered for rate limiting.
const maxFetchErrKeys = 4096

type fetchErrKey struct {
	topic     string
	partition int32
	err       string
}

type fetchErrLog struct {
	at      time.Time
	repeats int
}
