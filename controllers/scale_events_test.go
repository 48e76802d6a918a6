package controllers_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// healthyRunSize is the number of resources of TestHealthyRunRecordsNoWarningEvent: 1,000 take
// over a minute to become Ready on a loaded 2-core machine, too long for `make test`;
// BenchmarkReconcile500DLQsAnd500Pipelines fails on a Warning event of its 1,000.
const healthyRunSize = 500

// TestHealthyRunRecordsNoWarningEvent creates queues and pipelines as `kubectl apply -f dir` does,
// each pipeline before the policy and queue it refers to, and lists every event on the way to
// Ready: waiting for a reference, a topic being created, a rollout under way are normal progress,
// and a Warning is for what a person must look at.
func TestHealthyRunRecordsNoWarningEvent(t *testing.T) {
	r := runScale(t, scaleSpec{dlqs: healthyRunSize / 2, pipelines: healthyRunSize / 2, sharedPolicies: 4, readyOnly: true}, 30*time.Second)
	t.Logf("%d resources Ready after %v: %d Normal events, %d Warning", healthyRunSize, r.toReady.Round(time.Millisecond),
		r.eventList.byType[corev1.EventTypeNormal], r.eventList.byType[corev1.EventTypeWarning])
	if n := r.eventList.byType[corev1.EventTypeWarning]; n != 0 {
		t.Errorf("a healthy run recorded %d Warning events (count, reason: message):%s", n, r.eventList.describeWarnings())
	}
	// A first reconcile or rollout under way is no change a person must hear of: at 10,000 resources
	// it was 5,000 events for the API server to store.
	for key, n := range r.eventList.byReason {
		if strings.HasSuffix(key, " Progressing") || strings.HasSuffix(key, " Reconciling") {
			t.Errorf("a healthy run recorded %d events %q:%s", n, key, r.eventList.describeReasons())
		}
	}
}
