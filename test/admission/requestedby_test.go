package admission

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var actionRule = rbacv1.PolicyRule{APIGroups: []string{"retry.retryops.dev"}, Resources: []string{"deadletteractions"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}

// action returns a DeadLetterAction resolving the dead letters of queue orders-dlq, asked by
// requestedBy.
func action(namespace, name, requestedBy string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "retry.retryops.dev/v1alpha1",
		"kind":       "DeadLetterAction",
		"metadata":   map[string]any{"namespace": namespace, "name": name},
		"spec": map[string]any{
			"queue": "orders-dlq", "action": "Resolve", "note": "fixed upstream", "requestedBy": requestedBy,
			"selector": map[string]any{"reasons": []any{"non_retriable_error"}},
		},
	}}
}

// whoAmI returns the username the API server sees for c.
func whoAmI(ctx context.Context, t *testing.T, c client.Client) string {
	t.Helper()
	r := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, r); err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	return r.Status.UserInfo.Username
}

// With the shipped policy installed, the API server refuses a DeadLetterAction whose requestedBy is
// not the requesting user and accepts one whose requestedBy is; the spec of an existing action cannot
// be edited (the CRD's immutability rule), while its metadata can.
func TestRequestedByPolicy(t *testing.T) {
	env := policyEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	admin := env.Client
	namespace(ctx, t, admin, "ops", nil)
	refusedByThePolicy(ctx, t, admin, action("ops", "probe", "someone-else"), "a forged requestedBy is refused")

	t.Run("administrator", func(t *testing.T) {
		me := whoAmI(ctx, t, admin)
		expectDenied(t, create(ctx, admin, action("ops", "forged", "jane@example.com")),
			"spec.requestedBy must be the user creating the action, "+me+", not jane@example.com")
		expectAllowed(t, create(ctx, admin, action("ops", "own", me)))
	})

	t.Run("user", func(t *testing.T) {
		c := user(ctx, t, env, "ops", "alice", []rbacv1.PolicyRule{pipelineRule, actionRule})
		expectDenied(t, create(ctx, c, action("ops", "alice-as-bob", "bob")), "must be the user creating the action, alice, not bob")
		expectAllowed(t, create(ctx, c, action("ops", "alice-own", "alice")))

		// Editing the spec of an existing action is refused, by alice and by the administrator alike.
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(action("", "", "").GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ops", Name: "alice-own"}, got); err != nil {
			t.Fatal(err)
		}
		for who, cl := range map[string]client.Client{"alice": c, "administrator": admin} {
			edited := got.DeepCopy()
			if err := unstructured.SetNestedField(edited.Object, "Ignore", "spec", "action"); err != nil {
				t.Fatal(err)
			}
			err := cl.Update(ctx, edited)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "the spec of a DeadLetterAction is immutable") {
				t.Errorf("%s editing the spec: %v, want the immutability rule", who, err)
			}
			forged := got.DeepCopy()
			if err := unstructured.SetNestedField(forged.Object, "mallory", "spec", "requestedBy"); err != nil {
				t.Fatal(err)
			}
			if err := cl.Update(ctx, forged); err == nil {
				t.Errorf("%s changed requestedBy of an existing action", who)
			}
		}
		// Metadata is not the spec: labels may change.
		got.SetLabels(map[string]string{"incident": "42"})
		expectAllowed(t, c.Update(ctx, got))
	})
}
