package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	ktypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
)

// reconcileLog counts a manager's reconciles of each object by the cached read that begins them:
// every reconcile first reads its own object (fetch), so the first read of a reconcile (told apart
// by the reconcile ID controller-runtime puts in its context) names what is reconciled, and later
// reads (a pipeline reading its queue) are not counted as reconciles of what they read.
type reconcileLog struct {
	mu sync.Mutex
	// begun are the reconciles seen: a few dozen bytes each, tens of thousands in a suite run.
	begun map[ktypes.UID]bool
	n     map[reconciled]int64
}

type reconciled struct {
	kind reflect.Type
	key  client.ObjectKey
}

func newReconcileLog() *reconcileLog {
	return &reconcileLog{begun: map[ktypes.UID]bool{}, n: map[reconciled]int64{}}
}

// suiteReconciles counts the suite manager's reconciles.
var suiteReconciles = newReconcileLog()

func (l *reconcileLog) read(ctx context.Context, key client.ObjectKey, obj client.Object) {
	id := controller.ReconcileIDFromContext(ctx)
	if id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.begun[id] {
		l.begun[id] = true
		l.n[reconciled{reflect.TypeOf(obj), key}]++
	}
}

// of is the number of reconciles of o begun so far.
func (l *reconcileLog) of(o client.Object) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[reconciled{reflect.TypeOf(o), client.ObjectKeyFromObject(o)}]
}

// reconcileLoggingClient logs in log the reads of a manager's reconciles.
type reconcileLoggingClient struct {
	client.Client
	log *reconcileLog
}

func (c reconcileLoggingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.log.read(ctx, key, obj)
	return c.Client.Get(ctx, key, obj, opts...)
}

// wholeSince reports whether owner has run a whole reconcile since from (its count then).
// Reconciles of one object run one at a time: the first begun after from began after it, and it
// has ended when a second has begun.
func (l *reconcileLog) wholeSince(owner client.Object, from int64) bool {
	return l.of(owner) >= from+2
}

// holdsThroughResync checks that actual matches m on every poll until owner (a queue or pipeline of
// the suite manager) has run a whole reconcile since the call, so that a negative check cannot
// pass by the resync coming late.
func holdsThroughResync[T any](t *testing.T, owner client.Object, actual func() (T, error), m types.GomegaMatcher, desc ...any) {
	t.Helper()
	holdsThroughReconcile(t, suiteReconciles, owner, actual, m, desc...)
}

// holdsThroughReconcile is holdsThroughResync for the manager whose reconciles l counts.
func holdsThroughReconcile[T any](t *testing.T, l *reconcileLog, owner client.Object, actual func() (T, error), m types.GomegaMatcher, desc ...any) {
	t.Helper()
	from := l.of(owner)
	NewWithT(t).Eventually(func() (bool, error) {
		// Counted before actual is read: a whole reconcile counted then has ended before the read.
		done := l.wholeSince(owner, from)
		v, err := actual()
		if err != nil {
			return false, err
		}
		if ok, err := m.Match(v); err != nil || !ok {
			return false, StopTrying(fmt.Sprintf("before a whole reconcile of %s: %s", client.ObjectKeyFromObject(owner), m.FailureMessage(v)))
		}
		return done, nil
	}, wait, poll).Should(BeTrue(), desc...)
}

// awaitResync waits until owner (of the suite manager) has run a whole reconcile since the call.
func awaitResync(t *testing.T, owner client.Object) {
	t.Helper()
	suiteReconciles.await(t, owner)
}

// await waits until owner has run a whole reconcile since the call.
func (l *reconcileLog) await(t *testing.T, owner client.Object) {
	t.Helper()
	from := l.of(owner)
	NewWithT(t).Eventually(func() bool { return l.wholeSince(owner, from) }, wait, poll).Should(BeTrue(),
		"a whole reconcile of %s", client.ObjectKeyFromObject(owner))
}
