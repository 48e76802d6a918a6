package kafkaspec

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// A ledger record normally goes with its resource (Drop, when the finalizer lets go). One whose
// finalizer was removed by hand, or whose Drop failed, leaves a record naming a UID no resource has:
// Sweep finds those and deletes them, returning what they held so that the caller can say which
// topics nobody owns now (they stay in Kafka: a sweep never touches a topic).

// ledgerResourceAnnotation names the resource a record belongs to ("Kind namespace/name").
const ledgerResourceAnnotation = "retry.retryops.dev/resource"

// LedgerSweepMinAge is how old a record must be before a sweep may delete it: a record is written
// only for a resource that exists, so this only spares the reads of a resource created a moment ago
// from any lag.
const LedgerSweepMinAge = 10 * time.Minute

// maxSweptRecords bounds the records one sweep reads (the ledger holds one per resource).
const maxSweptRecords = 100000

// ResourceUID returns the UID of the resource of kind named namespace/name, or an error satisfying
// apierrors.IsNotFound when there is none. Any other error leaves the record alone.
type ResourceUID func(ctx context.Context, kind, namespace, name string) (types.UID, error)

// Orphan is a deleted ledger record: the resource it named and the topics it held.
type Orphan struct {
	Kind, Namespace, Name string
	UID                   types.UID
	Topics                []string
}

// Sweep deletes the records of resources that no longer exist (not found, or found with another
// UID: deleted and created again under the same name) and returns them. Records younger than
// LedgerSweepMinAge, and records whose resource cannot be read, are kept.
func (l *Ledger) Sweep(ctx context.Context, uidOf ResourceUID) ([]Orphan, error) {
	list := &corev1.ConfigMapList{}
	if err := l.Reader.List(ctx, list, client.InNamespace(l.Namespace), client.HasLabels{LedgerLabel}, client.Limit(maxSweptRecords)); err != nil {
		return nil, fmt.Errorf("listing the topic ledger: %w", err)
	}
	now := l.clock().Now()
	var orphans []Orphan
	for i := range list.Items {
		cm := &list.Items[i]
		uid, ok := strings.CutPrefix(cm.Name, "topics-")
		if !ok || uid == "" || now.Sub(cm.CreationTimestamp.Time) < LedgerSweepMinAge {
			continue
		}
		kind, nsName, ok := strings.Cut(cm.Annotations[ledgerResourceAnnotation], " ")
		ns, name, ok2 := strings.Cut(nsName, "/")
		if !ok || !ok2 || kind == "" || name == "" {
			continue
		}
		have, err := uidOf(ctx, kind, ns, name)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			continue
		case have == types.UID(uid):
			continue
		}
		if err := l.Drop(ctx, types.UID(uid)); err != nil {
			return orphans, err
		}
		orphans = append(orphans, Orphan{Kind: kind, Namespace: ns, Name: name, UID: types.UID(uid), Topics: parseLedger(cm.Data[ledgerTopicsKey])})
	}
	return orphans, nil
}
