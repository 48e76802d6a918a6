package controllers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	retryv1alpha1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/envtestutil"
	"github.com/retryops/retry-operator/internal/lease"
)

// keyOfUID is the namespace and name of the resource of UID uid in these tests.
func keyOfUID(uid types.UID) types.NamespacedName {
	return types.NamespacedName{Namespace: "team", Name: "r-" + string(uid)}
}

// TestAResourceGoneWithoutItsFinalizerGoesByItself: a pipeline waiting for its policy is deleted with
// its finalizer removed by hand, so no reconcile lets it go and the reconcile that finds it gone
// forgets nothing: its missing references go once their lease is over, at the next observation of
// another resource, while those of a resource still reconciled stay.
func TestAResourceGoneWithoutItsFinalizerGoesByItself(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &topicReconciler{Client: fake.NewClientBuilder().WithScheme(envtestutil.Scheme()).Build(), missing: newMissingReferences(clk)}
	missing := problems{{Reason: retryv1alpha1.ReasonReferenceNotFound, Progress: true, Message: `RetryPolicy "typo" not found`}}
	key := keyOfUID("a")
	r.missing.observe(key, "a", missing, time.Minute)
	var gone []types.NamespacedName
	if ok, err := r.fetch(context.Background(), ctrl.Request{NamespacedName: key}, &retryv1alpha1.ConsumerPipeline{}, func(k types.NamespacedName) { gone = append(gone, k) }); ok || err != nil {
		t.Fatalf("fetch of a pipeline that is gone: %v, %v", ok, err)
	}
	if len(gone) != 1 {
		t.Fatalf("gone %v", gone)
	}
	for range 3 {
		clk.SetTime(clk.Now().Add(lease.Min))
		r.missing.observe(keyOfUID("b"), "b", missing, time.Minute)
	}
	if _, kept := r.missing.byName[key]; kept || r.missing.len() != 1 {
		t.Fatalf("kept %v", r.missing.byName)
	}
}

// TestARecreatedResourceStartsItsGracePeriodAfresh: a pipeline deleted and created again under its
// name (a new UID) while its reference was missing gets the whole grace period again.
func TestARecreatedResourceStartsItsGracePeriodAfresh(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	m := newMissingReferences(clk)
	missing := problems{{Reason: retryv1alpha1.ReasonReferenceNotFound, Progress: true, Message: `RetryPolicy "typo" not found`}}
	key := keyOfUID("a")
	m.observe(key, "old", missing, time.Minute)
	clk.SetTime(clk.Now().Add(ReferenceGracePeriod - time.Second))
	if got := m.observe(key, "new", missing, time.Minute); got != nil {
		t.Fatalf("the new pipeline warned at once: %q", got)
	}
	clk.SetTime(clk.Now().Add(ReferenceGracePeriod))
	if got := m.observe(key, "new", missing, time.Minute); len(got) != 1 {
		t.Fatalf("the new pipeline after its own grace period: %q, want one Warning", got)
	}
}
