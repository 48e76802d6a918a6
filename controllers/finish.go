package controllers

import (
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
)

// finishReconcile ends a reconcile whose steps returned err and met the problems ps. Unless err is
// a write conflict (the object read was stale: a quick retry, and nothing is written from it),
// write patches the status rebuilt from what the steps found, a failed step included. Then the
// step's error, or else the first transient problem's, is returned for the work queue's backoff;
// with only user errors left nothing is requeued (a spec change will be); else the resource
// resyncs after requeue().
func finishReconcile(err error, ps problems, write func() error, requeue func() time.Duration) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return staleOrError(err)
	}
	if werr := write(); werr != nil {
		if err != nil {
			return ctrl.Result{}, errors.Join(err, werr)
		}
		return staleOrError(werr)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if t := ps.transient(); t != nil {
		return ctrl.Result{}, t
	}
	if ps.userOnly() {
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: requeue()}, nil
}

// staleOrError turns a write conflict (the cache was behind) into a quick, quiet retry; other errors
// are returned for the work queue's backoff.
func staleOrError(err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: staleRetry}, nil
	}
	return ctrl.Result{}, err
}

// soonest merges the requeues the phases of a reconcile ask for: the shortest that is not zero
// (zero: the phase asks for none); zero when none asks.
func soonest(after ...time.Duration) time.Duration {
	var d time.Duration
	for _, a := range after {
		if a > 0 && (d == 0 || a < d) {
			d = a
		}
	}
	return d
}
