package controllers_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
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
	// One event per resource on the way to Ready: a queue's topics created (its first Ready says no
	// more), a pipeline's topics created; none for a policy valid from its creation. Saying that it waits for another resource
	// is not counted; one that waited may have made its topics in two steps (its source at once, its
	// tiers once its policy came). At 1,000 resources there were 2.3 events per resource (a queue:
	// TopicCreated for its topic, again for its record of decisions, then TopicReady).
	var over []string
	for obj, notes := range r.eventList.notes {
		made := slices.DeleteFunc(slices.Clone(notes), waiting)
		if allowed := 1 + min(len(notes)-len(made), 1); len(made) > allowed {
			over = append(over, fmt.Sprintf("%s: %q", obj, notes))
		}
	}
	if n := r.eventList.byReason["RetryPolicy Normal "+retryv1alpha1.ReasonValid]; n != 0 {
		t.Errorf("%d policies valid from their creation recorded an event", n)
	}
	if len(over) > 0 {
		slices.Sort(over)
		t.Errorf("%d resources with more events than they need on the way to Ready, the first:\n%s", len(over), strings.Join(over[:min(len(over), 10)], "\n"))
	}
	// A first reconcile or rollout under way is no change a person must hear of: at 10,000 resources
	// it was 5,000 events for the API server to store.
	for key, n := range r.eventList.byReason {
		if strings.HasSuffix(key, " Progressing") || strings.HasSuffix(key, " Reconciling") {
			t.Errorf("a healthy run recorded %d events %q:%s", n, key, r.eventList.describeReasons())
		}
	}
}

// waiting says whether an event ("reason: note") says that its resource waits for another one to
// exist or to make its topic.
func waiting(event string) bool {
	reason, _, _ := strings.Cut(event, ": ")
	return slices.Contains([]string{retryv1alpha1.ReasonReferenceNotFound, retryv1alpha1.ReasonTopicNotOwned, "WaitingForReferences", "WaitingForTopics"}, reason)
}
