package dispatcher

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/retryops/retry-operator/sdk/headers"
)

// Re-parking. A retry tier's records are delivered at their due times, but its commits advance
// only over the finished prefix and its look-ahead window counts from the first unfinished record.
// A record due much later than its tier's delays (a Retry-After longer than every tier's, honoured
// up to retryAfter.maxDelay; a record an earlier, longer policy scheduled) would sit at the head of
// the window: once the window behind it filled, the partition would pause and every later retry of
// the tier wait for it. So once such a record has waited in its tier as long as any record of the
// tier waits, while it holds the window and records follow it, it is written again, unchanged
// (key, value, every header: its attempt count, due time, deadline start and idempotency key are
// the same), to the tail of its tier, and its offset committed once that write is acknowledged, as
// for every fate. The copy comes round again after at most another tier delay and is delivered when
// due; it is never delivered, nor its attempts counted, on the way. A record past the deadline by
// its due time is dead-lettered (deadline_exceeded) instead of re-parked.
//
// How often: once per reparkAge of its tier at most, so about due/reparkAge times in all, and one
// write at a time per partition (the next head waits for the write of this one): a record is
// re-parked only while records follow it in the partition, never a lone one, and only while one
// of them waits for it: a record behind it due sooner, or finished (its commit held), or a full
// window (the records not fetched may be due sooner). A tier of long waits alone is left as it is. Retry tiers keep no
// per-key order (their records are delivered at their due times), so nothing is reordered that
// was ordered. A draining tier (whose delays are no longer known) re-parks into itself once a
// minute: its committed offsets reach its end, and the operator drops it, only once its last
// record is delivered, as without re-parking.

// minReparkAge is the least a record waits in its tier before it is re-parked, whatever the tier's
// delays (a tier of zero delays would re-park without pause); drainingReparkAge that of a draining
// tier.
const (
	minReparkAge      = time.Second
	drainingReparkAge = time.Minute
)

// reparkAge is how long a record of tier t waits before it is re-parked: a current tier's longest
// backoff delay, at least minReparkAge; drainingReparkAge in a draining tier.
func (s *settings) reparkAge(t int) time.Duration {
	if t >= len(s.tierWin) {
		return drainingReparkAge
	}
	return max(s.tierWin[t].Latest, minReparkAge)
}

// reparkLocked starts the first unfinished record of retry-tier partition ps as a re-park (or a
// deadline dead letter) when it should be: queued, to be delivered, followed by other records, in
// the tier for reparkAge, and still not due within reparkAge. It returns when to look again (zero:
// on the next event).
func (e *Engine) reparkLocked(ps *partState, now time.Time, next **item) time.Time {
	if ps.tier < 1 || ps.revoking || e.active >= e.maxInFlight {
		return time.Time{}
	}
	it := ps.first()
	if it == nil || it.pre != nil || (ps.hw <= it.rec.Offset+1 && len(ps.items)-ps.head < 2) {
		return time.Time{}
	}
	// Nothing waits for it: every record fetched behind it is queued and due no sooner (the
	// earliest due is itself), and the window has room, so the records not yet fetched are fetched
	// as they come due. Re-parking would only copy the tier's long waits round and round.
	if records, bytes := ps.window(); records == ps.nQueued && ps.peek() == it &&
		records < e.lookAheadRecords && bytes < e.lookAheadBytes {
		return time.Time{}
	}
	age := e.reparkAge(ps.tier)
	if !it.due.After(now.Add(age)) {
		return time.Time{} // due soon: delivered as any record of the tier
	}
	// Its wait in the tier started when it was written (its Kafka timestamp), or at the latest when
	// it was fetched: a producer's clock ahead, or a forged timestamp, does not make it wait longer.
	since := it.rec.Timestamp
	if since.After(it.fetched) {
		since = it.fetched
	}
	if at := since.Add(age); at.After(now) {
		return at
	}
	if dl, ok := e.pol.DeadlineOf(it.srcTime); ok && it.due.After(dl) {
		it.pre = &failure{reason: headers.ReasonDeadlineExceeded, errorType: headers.ErrorTypeDeadlineExceeded,
			message: "the record is due at " + headers.FormatTime(it.due) + ", past its deadline (" + e.pol.Policy().Deadline.String() +
				" after " + headers.FormatTime(it.srcTime) + ")"}
	} else {
		it.repark = true
	}
	ps.startFirst(it)
	ps.noteStart(it.rec.Offset)
	e.active++
	e.slots++
	e.buffered--
	e.dispatchLocked(it, next)
	return time.Time{}
}

// reparkWrite writes the record again, as consumed, to the tail of its tier, stamped with the
// engine's time (its wait in the tier starts again); written settles it.
func (e *Engine) reparkWrite(it *item) {
	r := it.rec
	rec := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: e.clock.Now()}
	e.write(&write{it: it, rec: rec, repark: true, f: &failure{at: rec.Timestamp, errorType: headers.ErrorTypeRetryProduceFailed,
		message: "re-parking the record, due at " + headers.FormatTime(it.due) + ", in its tier"}})
}
