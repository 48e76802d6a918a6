package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
)

// Of pipelines sharing a consumer group or a tier base, the oldest keeps them; of pipelines created
// within one second (creationTimestamp's resolution) the one already running on them keeps them,
// so that a newcomer sorting first by name never stops it; a pipeline whose condition is of an
// earlier generation, or that is itself refused, is not running on them.
func TestSharingOwner(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	pipe := func(name string, created metav1.Time, reason string, observed int64) retryv1alpha1.ConsumerPipeline {
		p := retryv1alpha1.ConsumerPipeline{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: created, Generation: 2}}
		if reason != "" {
			status := metav1.ConditionFalse
			if reason == retryv1alpha1.ReasonTopicsReady {
				status = metav1.ConditionTrue
			}
			meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: retryv1alpha1.ConditionTopicsReady, Status: status,
				Reason: reason, ObservedGeneration: observed})
		}
		return p
	}
	later := metav1.NewTime(t0.Add(time.Second))
	for _, c := range []struct {
		name     string
		self     retryv1alpha1.ConsumerPipeline
		others   []retryv1alpha1.ConsumerPipeline
		wantName string
	}{
		{"the older wins whatever its name", pipe("z", later, "", 0), []retryv1alpha1.ConsumerPipeline{pipe("y", t0, "", 0)}, "y"},
		{"the older wins though the newer runs", pipe("a", t0, "", 0), []retryv1alpha1.ConsumerPipeline{pipe("b", later, retryv1alpha1.ReasonTopicsReady, 2)}, "a"},
		{"within one second, the running one keeps them against a newcomer sorting first",
			pipe("a-newcomer", t0, "", 0), []retryv1alpha1.ConsumerPipeline{pipe("billing", t0, retryv1alpha1.ReasonTopicsReady, 2)}, "billing"},
		{"the running one's own view", pipe("billing", t0, retryv1alpha1.ReasonSourceTopicMissing, 2), []retryv1alpha1.ConsumerPipeline{pipe("a-newcomer", t0, "", 0)}, "billing"},
		{"within one second, a refused one is not running", pipe("b", t0, "", 0), []retryv1alpha1.ConsumerPipeline{pipe("a", t0, retryv1alpha1.ReasonConsumerGroupConflict, 2)}, "a"},
		{"a refused one runs on nothing", pipe("b", t0, retryv1alpha1.ReasonTopicsReady, 2), []retryv1alpha1.ConsumerPipeline{pipe("a", t0, retryv1alpha1.ReasonTopicConflict, 2)}, "b"},
		{"a condition of an earlier generation says nothing", pipe("a", t0, "", 0), []retryv1alpha1.ConsumerPipeline{pipe("b", t0, retryv1alpha1.ReasonTopicsReady, 1)}, "a"},
		{"two running ones: by name", pipe("b", t0, retryv1alpha1.ReasonTopicsReady, 2), []retryv1alpha1.ConsumerPipeline{pipe("a", t0, retryv1alpha1.ReasonTopicsReady, 2)}, "a"},
		{"alone", pipe("a", t0, "", 0), nil, "a"},
	} {
		if got := sharingOwner(&c.self, c.others); got.Name != c.wantName {
			t.Errorf("%s: %s keeps them, want %s", c.name, got, c.wantName)
		}
	}
}
