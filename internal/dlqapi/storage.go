package dlqapi

import (
	"context"
	"errors"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/utils/clock"

	dlv1 "github.com/retryops/retry-operator/api/deadletters/v1alpha1"
	"github.com/retryops/retry-operator/internal/deadletters"
	"github.com/retryops/retry-operator/internal/kafka"
)

// Kafka is what the API needs of Kafka: admin clients (offsets) and scans.
type Kafka interface {
	kafka.AdminFactory
	kafka.Scanner
}

// Storage is the read-only REST storage of deadletters.
type Storage struct {
	// Queues finds a namespace's DeadLetterQueues.
	Queues Queues
	// Kafka reads their topics.
	Kafka Kafka
	// MaxListPayload bounds a key, a value, a header name or value in a list (default
	// dlv1.MaxListPayloadBytes).
	MaxListPayload int
	// Clock reads the time of a list's scan budget and of the table's age column (default the real
	// clock).
	Clock clock.PassiveClock
	// ScanBudget is how long a list reads before it returns a page it could not fill, with a
	// continue token (default 10s; at most half of what is left of the request's deadline).
	ScanBudget time.Duration

	// cache keeps the decisions read from each queue's record of decisions (states.go).
	cache stateCache
}

var (
	_ rest.Storage              = &Storage{}
	_ rest.Scoper               = &Storage{}
	_ rest.Getter               = &Storage{}
	_ rest.Lister               = &Storage{}
	_ rest.SingularNameProvider = &Storage{}
)

var groupResource = dlv1.SchemeGroupVersion.WithResource(dlv1.Resource).GroupResource()

// New implements rest.Storage.
func (s *Storage) New() runtime.Object { return &dlv1.DeadLetter{} }

// Destroy implements rest.Storage.
func (s *Storage) Destroy() {}

// NewList implements rest.Lister.
func (s *Storage) NewList() runtime.Object { return &dlv1.DeadLetterList{} }

// NamespaceScoped implements rest.Scoper.
func (s *Storage) NamespaceScoped() bool { return true }

// GetSingularName implements rest.SingularNameProvider.
func (s *Storage) GetSingularName() string { return "deadletter" }

// Get returns one dead letter, its key and value whole.
func (s *Storage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	qname, id, ok := ParseName(name)
	if !ok || ns == "" {
		return nil, apierrors.NewNotFound(groupResource, name)
	}
	q, err := s.Queues.Get(ctx, ns, qname)
	var notOwned *NotOwnedError
	switch {
	case apierrors.IsNotFound(err):
		return nil, apierrors.NewNotFound(groupResource, name)
	case errors.As(err, &notOwned):
		nf := apierrors.NewNotFound(groupResource, name)
		nf.ErrStatus.Message += ": " + notOwned.Error()
		return nil, nf
	case err != nil:
		return nil, err
	}
	admin, offs, err := s.offsets(ctx, q)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(offs[q.Topic], func(p kafka.PartitionOffsets) bool { return p.Partition == id.Partition })
	if i < 0 || id.Offset < offs[q.Topic][i].Start || id.Offset >= offs[q.Topic][i].End {
		return nil, apierrors.NewNotFound(groupResource, name)
	}
	var entry *deadletters.Entry
	err = s.Kafka.Scan(ctx, q.Conn, map[string]map[int32]kafka.OffsetRange{q.Topic: {id.Partition: {From: id.Offset, To: id.Offset + 1}}}, func(r kafka.Record) {
		if r.Offset == id.Offset {
			e := deadletters.ParseEntry(r)
			entry = &e
		}
	})
	if err != nil {
		return nil, unavailable(err)
	}
	if entry == nil {
		return nil, apierrors.NewNotFound(groupResource, name)
	}
	src, err := s.loadStates(ctx, admin, q)
	if err != nil {
		return nil, err
	}
	states, err := src.forRange(ctx, id.Partition, id.Offset, id.Offset+1)
	if err != nil {
		return nil, err
	}
	st := states.Get(id)
	d := toObject(ns, q.Name, q.Topic, entry, st, labelsOf(q.Name, entry, st), 0)
	return &d, nil
}

// clock is s.Clock, the real clock by default.
func (s *Storage) clock() clock.PassiveClock {
	if s.Clock == nil {
		return clock.RealClock{}
	}
	return s.Clock
}

// offsets returns q's admin client and its topic's offsets; Kafka's errors are Unavailable.
func (s *Storage) offsets(ctx context.Context, q Queue) (kafka.Admin, map[string][]kafka.PartitionOffsets, error) {
	admin, err := s.Kafka.Admin(ctx, q.Conn)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	offs, err := admin.ListOffsets(ctx, q.Topic)
	if err != nil {
		return nil, nil, unavailable(err)
	}
	return admin, offs, nil
}

// unavailable is err as the API answers it: err itself when it is an API status, else 503
// ServiceUnavailable with its message. A status wrapped inside (a Secret the Kafka client could not
// read) answered another request: the client is told the topic could not be read, not that status.
func unavailable(err error) error {
	if _, ok := err.(apierrors.APIStatus); ok { // err itself, not a status it wraps
		return err
	}
	return apierrors.NewServiceUnavailable("reading the dead letter topic: " + err.Error())
}
