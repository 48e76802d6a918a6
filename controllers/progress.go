package controllers

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// A Ready that goes False on the way to True (a pipeline applied together with its policy and
// queue, a first rollout) is worth a Normal event: a Warning is for what a person must look at,
// and a healthy apply of many resources must not fill `kubectl get events` with them.

// progressReasons are the reasons of a Ready that is not True yet on the way to True, set by no
// problem: a first reconcile, a rollout under way.
var progressReasons = []string{v1.ReasonReconciling, reasonProgressing}

// progress reports whether ready, not True, is normal progress: every problem of ps is Progress,
// and ready's reason is one of them or a progress reason.
func (ps problems) progress(ready *metav1.Condition) bool {
	for _, p := range ps {
		if !p.Progress {
			return false
		}
	}
	return slices.Contains(progressReasons, ready.Reason) || slices.ContainsFunc(ps, func(p *problem) bool { return p.Reason == ready.Reason })
}
