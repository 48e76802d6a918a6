package kafkaspec

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The topic ledger is the operator's durable record of the Kafka topics it created, or adopted, for
// each resource: one ConfigMap per resource in the manager's own namespace, which tenants cannot
// write, unlike the resource itself (an annotation on it could be forged to make the operator trim
// or delete someone else's topic). It survives a status wipe and the resource's annotations being
// edited, and goes when the resource's finalizer lets go. Nothing on the resource is ever read into
// it: a topic enters it only through Record, after the claim checks of the one recording it.
const (
	// LedgerLabel marks the ledger's ConfigMaps (value: the kind of the resource).
	LedgerLabel = "retry.retryops.dev/topic-ledger"
	// ledgerTopicsKey holds the topic names, one per line, sorted.
	ledgerTopicsKey = "topics"
	// maxLedgerTopics bounds the topics one resource may have recorded (a pipeline's source and its
	// retry tiers, drained ones included, stay far below it).
	maxLedgerTopics = 1000
)

// Ledger reads and writes the topic ledger. Reads go to the API server, not the cache (the manager
// caches only the objects it owns in the watched namespaces), and are memoised per resource UID:
// only the leader writes the ledger, so its memory stays true between restarts.
type Ledger struct {
	// Reader reads ConfigMaps uncached; Writer creates, patches and deletes them.
	Reader client.Reader
	Writer client.Client
	// Namespace is the manager's own namespace, which holds the ledger.
	Namespace string
	// Clock tells a sweep how old a record is; the real clock when nil.
	Clock clock.PassiveClock

	mu     sync.Mutex
	topics map[types.UID][]string
	// stored are the resources whose record exists, as read or written: a change to it is a patch,
	// without a create refused first.
	stored map[types.UID]bool
}

// ledgerName is the ConfigMap holding o's topics.
func ledgerName(uid types.UID) string { return "topics-" + string(uid) }

// Topics returns the topics recorded for o, sorted.
func (l *Ledger) Topics(ctx context.Context, o client.Object) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.load(ctx, o)
}

// Owns reports whether topic is recorded for o.
func (l *Ledger) Owns(ctx context.Context, o client.Object, topic string) (bool, error) {
	names, err := l.Topics(ctx, o)
	return slices.Contains(names, topic), err
}

// load returns o's topics, reading them once; l.mu is held.
func (l *Ledger) load(ctx context.Context, o client.Object) ([]string, error) {
	if names, ok := l.topics[o.GetUID()]; ok {
		return names, nil
	}
	cm := &corev1.ConfigMap{}
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: ledgerName(o.GetUID())}, cm)
	var names []string
	switch {
	case err == nil:
		names = parseLedger(cm.Data[ledgerTopicsKey])
		l.markStored(o.GetUID())
	case apierrors.IsNotFound(err):
		// Nothing recorded yet.
	default:
		return nil, fmt.Errorf("reading the topic ledger: %w", err)
	}
	if l.topics == nil {
		l.topics = map[types.UID][]string{}
	}
	l.topics[o.GetUID()] = names
	return names, nil
}

// Record adds names to o's topics before they are created (or adopted), so that a crash between the
// two leaves a record of a topic that may not exist rather than a topic nobody owns.
func (l *Ledger) Record(ctx context.Context, o client.Object, names ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	have, err := l.load(ctx, o)
	if err != nil {
		return err
	}
	all := append(slices.Clone(have), names...)
	slices.Sort(all)
	all = slices.Compact(all)
	if len(all) == len(have) {
		return nil
	}
	if len(all) > maxLedgerTopics {
		return fmt.Errorf("the topic ledger holds at most %d topics per resource", maxLedgerTopics)
	}
	if err := l.write(ctx, o, all); err != nil {
		return err
	}
	l.topics[o.GetUID()] = all
	return nil
}

// Forget removes names, deleted, from o's topics.
func (l *Ledger) Forget(ctx context.Context, o client.Object, names ...string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	have, err := l.load(ctx, o)
	if err != nil {
		return err
	}
	left := slices.DeleteFunc(slices.Clone(have), func(n string) bool { return slices.Contains(names, n) })
	if len(left) == len(have) {
		return nil
	}
	if err := l.write(ctx, o, left); err != nil {
		return err
	}
	l.topics[o.GetUID()] = left
	return nil
}

// Drop deletes o's record once o is gone (its finalizer letting go).
func (l *Ledger) Drop(ctx context.Context, uid types.UID) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.topics, uid)
	delete(l.stored, uid)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: ledgerName(uid)}}
	if err := l.Writer.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the topic ledger's record: %w", err)
	}
	return nil
}

// write stores names as o's record, creating it the first time.
func (l *Ledger) write(ctx context.Context, o client.Object, names []string) error {
	kind := reflect.Indirect(reflect.ValueOf(o)).Type().Name()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: l.Namespace, Name: ledgerName(o.GetUID()),
			Labels: map[string]string{LedgerLabel: strings.ToLower(kind)},
			Annotations: map[string]string{
				ledgerResourceAnnotation: fmt.Sprintf("%s %s/%s", kind, o.GetNamespace(), o.GetName()),
			},
		},
		Data: map[string]string{ledgerTopicsKey: strings.Join(names, "\n")},
	}
	patch := func() error {
		return l.Writer.Patch(ctx, &corev1.ConfigMap{ObjectMeta: cm.ObjectMeta, Data: cm.Data}, client.MergeFrom(&corev1.ConfigMap{}))
	}
	var err error
	if l.stored[o.GetUID()] {
		// Deleted meanwhile (by hand): made again.
		if err = patch(); apierrors.IsNotFound(err) {
			err = l.Writer.Create(ctx, cm)
		}
	} else if err = l.Writer.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		err = patch()
	}
	if err != nil {
		return fmt.Errorf("writing the topic ledger: %w", err)
	}
	l.markStored(o.GetUID())
	return nil
}

// markStored records that uid's record exists; l.mu is held.
func (l *Ledger) markStored(uid types.UID) {
	if l.stored == nil {
		l.stored = map[types.UID]bool{}
	}
	l.stored[uid] = true
}

// parseLedger splits a ledger value (one name per line) into sorted, distinct names.
func parseLedger(v string) []string {
	var names []string
	for _, n := range strings.Split(v, "\n") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// Recorded reports whether topic is in o's record, read afresh: for readers that are not the leader
// (the deadletters API serves on every replica), which must neither trust a memo the leader may have
// moved past nor write.
func (l *Ledger) Recorded(ctx context.Context, o client.Object, topic string) (bool, error) {
	cm := &corev1.ConfigMap{}
	err := l.Reader.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: ledgerName(o.GetUID())}, cm)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the topic ledger: %w", err)
	}
	return slices.Contains(parseLedger(cm.Data[ledgerTopicsKey]), topic), nil
}

// clock is l.Clock, or the real clock.
func (l *Ledger) clock() clock.PassiveClock {
	if l.Clock == nil {
		return clock.RealClock{}
	}
	return l.Clock
}
