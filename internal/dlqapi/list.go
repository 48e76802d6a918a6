package dlqapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/utils/clock"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Chunk bounds, in records of one partition read per scan: the first chunk of a page reads about
// twice the page, each next one twice the previous, up to maxChunk.
const (
	minChunk = 500
	maxChunk = 20000
)

// List returns a page of the namespace's dead letters that match the selectors: at most
// dlv1.MaxListItems and about dlv1.MaxListBytes, read for at most the scan budget (see page). A queue
// that cannot be read is passed over with a warning, unless it is the only one the list selects.
func (s *Storage) List(ctx context.Context, opts *metainternalversion.ListOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	if ns == "" {
		return nil, apierrors.NewBadRequest("deadletters are listed one namespace at a time: give a namespace (-n)")
	}
	f, err := newFilter(opts)
	if err != nil {
		return nil, err
	}
	var pos *cursor
	if opts != nil && opts.Continue != "" {
		c, err := decodeCursor(opts.Continue, ns)
		if err != nil {
			return nil, err
		}
		pos = &c
	}
	names, err := s.Queues.Names(ctx, ns)
	if err != nil {
		return nil, err
	}
	names = slices.DeleteFunc(names, func(n string) bool { return !f.matchQueue(n) })
	out := &dlv1.DeadLetterList{TypeMeta: metav1.TypeMeta{APIVersion: dlv1.SchemeGroupVersion.String(), Kind: dlv1.ListKind}, Items: []dlv1.DeadLetter{}}
	pg := s.newPage(ctx, opts, out)
	for _, name := range names {
		if pos != nil && name < pos.Queue {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		from := cursor{Namespace: ns, Queue: name}
		if pos != nil && name == pos.Queue {
			from = *pos
		}
		if pg.late() {
			out.Continue = from.encode()
			break
		}
		next, err := s.listQueue(ctx, ns, name, from, f, pg)
		// A token after this queue is progress: its time counts against the budget as a scan's does
		// (a queue whose broker answers nothing takes the client's request timeout to fail).
		pg.scanned = true
		if err != nil {
			if ctx.Err() != nil || len(names) == 1 {
				return nil, err
			}
			// The others are listed; the continue token goes on after this queue.
			warning.AddWarning(ctx, "", fmt.Sprintf("DeadLetterQueue %s/%s could not be read, its dead letters are not in this list: %s",
				ns, name, cut(err.Error(), 512)))
			continue
		}
		if next != nil {
			out.Continue = next.encode()
			break
		}
	}
	return out, nil
}

// defaultScanBudget is how long a list reads before it returns a page it could not fill.
const defaultScanBudget = 10 * time.Second

// page is the response being filled and its bounds.
type page struct {
	out        *dlv1.DeadLetterList
	limit      int64
	bytes      int64
	maxPayload int
	clock      clock.PassiveClock
	// stopAt (on clock: the scan budget) and halfway (on the real clock: half of what was left of
	// the request's deadline, an instant of the real clock) are when a page not full returns what
	// it found, once a chunk or a queue was read (so that every request makes progress).
	stopAt, halfway time.Time
	scanned         bool
}

// newPage bounds a list's page: limit items (at most dlv1.MaxListItems, the default), about
// dlv1.MaxListBytes, and the scan budget (ScanBudget, at most half of what is left of the request).
func (s *Storage) newPage(ctx context.Context, opts *metainternalversion.ListOptions, out *dlv1.DeadLetterList) *page {
	pg := &page{out: out, limit: dlv1.MaxListItems, maxPayload: s.MaxListPayload, clock: s.clock()}
	if opts != nil && opts.Limit > 0 && opts.Limit < pg.limit {
		pg.limit = opts.Limit
	}
	if pg.maxPayload <= 0 {
		pg.maxPayload = dlv1.MaxListPayloadBytes
	}
	budget := s.ScanBudget
	if budget <= 0 {
		budget = defaultScanBudget
	}
	pg.stopAt = pg.clock.Now().Add(budget)
	if dl, ok := ctx.Deadline(); ok {
		now := realClock.Now()
		pg.halfway = now.Add(dl.Sub(now) / 2)
	}
	return pg
}

// realClock reads what is left of a request's deadline, which is an instant of the real clock
// whatever Storage.Clock is.
var realClock clock.PassiveClock = clock.RealClock{}

func (pg *page) add(d dlv1.DeadLetter) {
	pg.out.Items = append(pg.out.Items, d)
	pg.bytes += approxSize(&d)
}

func (pg *page) full() bool {
	return int64(len(pg.out.Items)) >= pg.limit || pg.bytes >= dlv1.MaxListBytes
}

func (pg *page) late() bool {
	return pg.scanned && (!pg.clock.Now().Before(pg.stopAt) || !pg.halfway.IsZero() && !realClock.Now().Before(pg.halfway))
}

// listQueue appends to the page the matching dead letters of queue name from position from; it
// returns where to continue when the page is full or its time is spent. The decisions come from the
// cache, or, for a queue with more than it keeps of one, are read for each chunk (loadStates).
func (s *Storage) listQueue(ctx context.Context, ns, name string, from cursor, f *filter, pg *page) (*cursor, error) {
	q, err := s.Queues.Get(ctx, ns, name)
	var notOwned *NotOwnedError
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // deleted since it was listed
	case errors.As(err, &notOwned):
		// Shown to the client (kubectl prints it as a warning), and the list goes on.
		warning.AddWarning(ctx, "", notOwned.Error())
		return nil, nil
	case err != nil:
		return nil, err
	}
	admin, offs, err := s.offsets(ctx, q)
	if err != nil {
		return nil, err
	}
	parts := slices.Clone(offs[q.Topic])
	slices.SortFunc(parts, func(a, b kafka.PartitionOffsets) int { return int(a.Partition) - int(b.Partition) })
	var src *stateSource
	for _, p := range parts {
		if p.Partition < from.Partition {
			continue
		}
		start := p.Start
		if p.Partition == from.Partition && from.Offset > start {
			start = from.Offset
		}
		if start >= p.End {
			continue
		}
		if src == nil {
			if src, err = s.loadStates(ctx, admin, q); err != nil {
				return nil, err
			}
		}
		// pg.limit is at most dlv1.MaxListItems: no overflow.
		chunk := min(max(int64(minChunk), 2*pg.limit), maxChunk)
		for start < p.End {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if pg.late() {
				return &cursor{Namespace: ns, Queue: q.Name, Partition: p.Partition, Offset: start}, nil
			}
			end := start + min(chunk, p.End-start)
			chunk = min(2*chunk, maxChunk)
			states, err := src.forRange(ctx, p.Partition, start, end)
			if err != nil {
				return nil, err
			}
			next, err := s.scanChunk(ctx, ns, q, p.Partition, start, end, states, f, pg)
			if err != nil {
				return nil, err
			}
			if next >= 0 {
				return &cursor{Namespace: ns, Queue: q.Name, Partition: p.Partition, Offset: next}, nil
			}
			start = end
		}
	}
	return nil, nil
}

// scanChunk reads [start, end) of one partition into the page; it returns the offset after the last
// one kept when the page became full, -1 otherwise.
func (s *Storage) scanChunk(ctx context.Context, ns string, q Queue, part int32, start, end int64, states *decisions, f *filter, pg *page) (int64, error) {
	scanCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := int64(-1)
	err := s.Kafka.Scan(scanCtx, q.Conn, map[string]map[int32]kafka.OffsetRange{q.Topic: {part: {From: start, To: end}}}, func(r kafka.Record) {
		if next >= 0 || r.Offset < start || r.Offset >= end {
			return
		}
		if !f.matchTime(r.Timestamp) {
			return
		}
		e := deadletters.ParseEntry(r)
		st := states.Get(deadletters.ID{Partition: part, Offset: r.Offset})
		lbls := labelsOf(q.Name, &e, st)
		if !f.matchEntry(ns, q.Name, &e, lbls) {
			return
		}
		pg.add(toObject(ns, q.Name, q.Topic, &e, st, lbls, pg.maxPayload))
		if pg.full() {
			next = r.Offset + 1
			cancel()
		}
	})
	pg.scanned = true
	if err != nil && (next < 0 || ctx.Err() != nil) {
		return -1, unavailable(err)
	}
	return next, nil
}
