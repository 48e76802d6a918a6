package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// policyWithout returns a RetryPolicy with maxAttempts and the spec fields extra, as a user writes
// it (no backoff unless extra has one).
func policyWithout(ns string, maxAttempts int64, extra map[string]any) *unstructured.Unstructured {
	spec := map[string]any{"maxAttempts": maxAttempts}
	for k, v := range extra {
		spec[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "retry.retryops.dev/v1alpha1", "kind": "RetryPolicy",
		"metadata": map[string]any{"generateName": "one-", "namespace": ns},
		"spec":     spec,
	}}
}

// A policy of one attempt (no retry) needs no backoff, which would mean nothing for it; a policy
// that retries still needs one.
func TestOneAttemptPolicyNeedsNoBackoff(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	for name, extra := range map[string]map[string]any{
		"maxAttempts 1 alone":                      nil,
		"maxAttempts 1 with a deadline":            {"deadline": "20m"},
		"maxAttempts 1 with classification":        {"classification": map[string]any{"defaultAction": "DeadLetter"}},
		"maxAttempts 1 with a backoff (as before)": {"backoff": map[string]any{"initialDelay": "1s", "maxDelay": "10s"}},
	} {
		if err := env.Client.Create(ctx, policyWithout(ns, 1, extra)); err != nil {
			t.Errorf("%s: rejected: %v", name, err)
		}
	}
	err := env.Client.Create(ctx, policyWithout(ns, 2, nil))
	if err == nil || !strings.Contains(err.Error(), "backoff is required when maxAttempts is more than 1") {
		t.Errorf("maxAttempts 2 without backoff: %v, want the rule asking for a backoff", err)
	}
}
