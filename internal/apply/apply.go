// Package apply applies the objects a resource owns (ConfigMaps, Deployments, PrometheusRules,
// RBAC objects) with server-side apply as the operator's field manager, with the resource as
// controller owner, and only when the cached object lacks a field the operator sets: a resync that
// finds everything in place writes nothing.
package apply

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"math"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// FieldOwner is the server-side apply field manager of every object the operator applies.
const FieldOwner = "retry-operator"

// ConflictError is an object of the name to apply that exists and belongs to another controller
// owner: it is left alone.
type ConflictError struct {
	// Kind and Name are the object's.
	Kind, Name string
	// OwnerKind and OwnerName are its controller owner's.
	OwnerKind, OwnerName string
}

func (e *ConflictError) Error() string {
	if e.OwnerKind == "" {
		return fmt.Sprintf("%s %s exists and is not controlled by this resource; the operator does not adopt it: delete or rename it", e.Kind, e.Name)
	}
	return fmt.Sprintf("%s %s exists and belongs to %s %s: delete or rename it", e.Kind, e.Name, e.OwnerKind, e.OwnerName)
}

// AppliedAnnotation is the SHA-256 (hex) of what Owned last applied to a child, applied with it: a
// child that holds every field rendered but another digest holds a field the operator no longer
// renders (a label, an annotation or a data key dropped from the rendering: a pod annotation removed
// from a pipeline's template, a flag's label, an operator upgrade), and is applied again, which
// removes it. A child without it (its annotations edited away) is applied again too.
const AppliedAnnotation = "retry.retryops.dev/applied-sha256"

// Cached reads an object from c (the manager's cache) into obj: obj when it exists, nil when it
// does not or the read failed (then Owned applies without comparing).
func Cached(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) client.Object {
	if err := c.Get(ctx, key, obj); err != nil {
		return nil
	}
	return obj
}

// Owned applies desired (a typed object or an unstructured one, with apiVersion and kind) with
// server-side apply as FieldOwner, forcing ownership of its fields, with owner as controller owner
// (and blockOwnerDeletion). live is the object as cached (nil when absent or unknown): when it
// already holds every field desired sets, with the same values, nothing is sent, so a resync writes
// nothing (a ConfigMap whose data the cache keeps as digests, DropData, is compared by them).
// Otherwise the apply reverts out-of-band changes to the fields the operator owns; fields it
// does not set (defaults, other managers' additions) are left alone. A list to which another
// manager added items never compares equal: it is applied again whenever the object or the
// desired one changed, which the API server answers without a change.
//
// An object the cache does not show is first read from the API server when c is an UncachedReader,
// and then treated like a cached one: applied only if owner controls it and it lacks a field.
// Without an UncachedReader a dry-run create checks the name is free (one that is not is a
// *ConflictError).
//
// The same object is not applied twice over the same version of the child (applied, which may be
// nil): a reconcile that comes before the cache has seen the last apply writes nothing.
//
// It returns the object as the API server has it after the apply (or as cached), and whether it
// applied. An object of that name controlled by another owner is a *ConflictError and is left
// alone; the API server's errors are returned as they are (apierrors.IsInvalid tells an object it
// rejects as invalid, a pod template that passes the CRD's schema but not the Deployment's
// validation, say).
func Owned(ctx context.Context, c client.Client, applied *Cache, owner client.Object, desired runtime.Object, live client.Object) (*unstructured.Unstructured, bool, error) {
	u, wrote, _, err := owned(ctx, c, applied, owner, desired, live)
	return u, wrote, err
}

// owned is Owned, and tells also whether live was found to hold desired already (not only not
// applied again because an apply over this version is in flight).
func owned(ctx context.Context, c client.Client, cache *Cache, owner client.Object, desired runtime.Object, live client.Object) (_ *unstructured.Unstructured, applied, equal bool, _ error) {
	u, err := Object(desired)
	if err != nil {
		return nil, false, false, err
	}
	if err := controllerutil.SetControllerReference(owner, u, c.Scheme()); err != nil {
		return nil, false, false, err
	}
	sum, summed := sumOf(u)
	if summed {
		annotations := u.GetAnnotations()
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[AppliedAnnotation] = hex.EncodeToString(sum[:])
		u.SetAnnotations(annotations)
	}
	if live == nil {
		// Not seen: never applied over an object the cache has not shown yet (an apply would adopt
		// it). The cache holds only objects with the operator's label, so one of the name may exist
		// all the same: someone else's (a conflict), ours whose label someone removed (applied
		// again, label and all), or ours just applied and not in the cache yet (compared, so that
		// the reconcile right after an apply does not apply it again).
		existing, err := checkUncached(ctx, c, u)
		if err != nil {
			return nil, false, false, err
		}
		live = existing
	}
	if live != nil {
		if ref := metav1.GetControllerOf(live); ref == nil || ref.UID != owner.GetUID() {
			// Another owner's, or nobody's (made by hand, by a tenant who predicted the name, by
			// GitOps): never adopted or overwritten.
			ce := &ConflictError{Kind: u.GetKind(), Name: u.GetName()}
			if ref != nil {
				ce.OwnerKind, ce.OwnerName = ref.Kind, ref.Name
			}
			return nil, false, false, ce
		}
		have, err := toUnstructuredMap(live)
		if err != nil {
			return nil, false, false, err
		}
		want := maps.Clone(u.Object)
		// Objects read from the cache may lack their apiVersion and kind.
		delete(want, "apiVersion")
		delete(want, "kind")
		same := true
		if digests, ok := cachedDigests(have); ok {
			// The cache keeps this ConfigMap's data as digests (DropData).
			same = digestsContain(digests, want["data"])
			delete(want, "data")
		}
		if same && contains(have, want) {
			return &unstructured.Unstructured{Object: have}, false, true, nil
		}
		if summed && cache.has(appliedKey(owner, u, live), sum) {
			return &unstructured.Unstructured{Object: have}, false, false, nil
		}
	}
	// Before the apply, which fills u with the API server's answer.
	var key cacheKey
	if live != nil && summed {
		key = appliedKey(owner, u, live)
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return nil, false, false, err
	}
	if live != nil && summed {
		cache.add(key, sum)
	}
	return u, true, false, nil
}

// UncachedReader is a client that can also read from the API server, past its cache: Owned uses it
// for an object of a child's name the cache does not show.
type UncachedReader interface {
	// UncachedReader reads from the API server.
	UncachedReader() client.Reader
}

// checkUncached tells whether an object of u's name, which the cache does not show, exists: read
// from the API server when c can (an UncachedReader; a read, where a dry-run create would be a
// write), else with a dry-run create, which cannot tell whose an existing object is (a
// *ConflictError). It returns nil when there is none.
func checkUncached(ctx context.Context, c client.Client, u *unstructured.Unstructured) (client.Object, error) {
	ur, ok := c.(UncachedReader)
	if !ok {
		err := c.Create(ctx, u.DeepCopy(), client.DryRunAll, client.FieldOwner(FieldOwner))
		if apierrors.IsAlreadyExists(err) {
			return nil, &ConflictError{Kind: u.GetKind(), Name: u.GetName()}
		}
		return nil, err
	}
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(u.GroupVersionKind())
	if err := ur.UncachedReader().Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	// Only the cache's digests are compared as such; this one has its data.
	a := got.GetAnnotations()
	if _, ok := a[CachedDataAnnotation]; ok {
		delete(a, CachedDataAnnotation)
		got.SetAnnotations(a)
	}
	return got, nil
}

// Object converts an object to the unstructured form applied: without status, without null
// values (a typed object's zero creationTimestamp, say), so that the operator owns only the fields
// it sets.
func Object(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := toUnstructuredMap(obj)
	if err != nil {
		return nil, err
	}
	m = runtime.DeepCopyJSON(m)
	delete(m, "status")
	pruneNulls(m)
	return &unstructured.Unstructured{Object: m}, nil
}

func toUnstructuredMap(obj runtime.Object) (map[string]any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

// pruneNulls removes null values from maps, recursively.
func pruneNulls(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			if e == nil {
				delete(v, k)
				continue
			}
			pruneNulls(e)
		}
	case []any:
		for _, e := range v {
			pruneNulls(e)
		}
	}
}

// contains reports whether have holds every field of want with the same value. Lists must have the
// same length and match element by element (the API server keeps the order of an applied list); an
// empty map or list in want matches an absent field.
func contains(have, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok {
				if isEmpty(wv) {
					continue
				}
				return false
			}
			if !contains(hv, wv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok {
			return len(w) == 0 && have == nil
		}
		if len(h) != len(w) {
			return false
		}
		for i := range w {
			if !contains(h[i], w[i]) {
				return false
			}
		}
		return true
	default:
		if hn, ok := number(have); ok {
			wn, ok := number(want)
			return ok && hn == wn
		}
		return have == want
	}
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// number returns v as a float64 when it is a JSON number of any Go type.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int32:
		return float64(n), true
	case int:
		return float64(n), true
	case float64:
		if math.IsNaN(n) {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// Decode converts u, as Owned returned it, into the typed obj.
func Decode(u *unstructured.Unstructured, obj runtime.Object) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		return fmt.Errorf("decoding the applied %s: %w", u.GetKind(), err)
	}
	return nil
}
