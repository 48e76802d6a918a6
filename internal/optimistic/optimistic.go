// Package optimistic writes to the objects a controller reconciles (their status, finalizers and
// annotations) with merge patches that carry the object's resourceVersion: a write computed from a
// stale read (the cache a moment behind) fails with a conflict instead of undoing a newer change or
// doing the same thing twice, and the reconcile is retried on a fresh read.
package optimistic

import (
	"context"
	"maps"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
)

// PatchStatus sets obj's status with set and writes it when it changed. It reports whether it
// wrote; an object gone meanwhile is no error.
func PatchStatus[O client.Object](ctx context.Context, c client.Client, obj O, set func(O)) (bool, error) {
	before := obj.DeepCopyObject().(O)
	set(obj)
	if equality.Semantic.DeepEqual(before, obj) {
		return false, nil
	}
	if err := c.Status().Patch(ctx, obj, lockedFrom(before)); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return true, nil
}

// AddFinalizer adds finalizer to o if it lacks it.
func AddFinalizer(ctx context.Context, c client.Client, o client.Object, finalizer string) error {
	if controllerutil.ContainsFinalizer(o, finalizer) {
		return nil
	}
	p := lockedFrom(o)
	controllerutil.AddFinalizer(o, finalizer)
	return c.Patch(ctx, o, p)
}

// RemoveFinalizer removes finalizer from o if it has it; an object gone meanwhile is no error.
func RemoveFinalizer(ctx context.Context, c client.Client, o client.Object, finalizer string) error {
	if !controllerutil.ContainsFinalizer(o, finalizer) {
		return nil
	}
	p := lockedFrom(o)
	controllerutil.RemoveFinalizer(o, finalizer)
	return client.IgnoreNotFound(c.Patch(ctx, o, p))
}

// SetAnnotation sets the annotation key of o to value, or removes it when value is "", unless it
// already has that value.
func SetAnnotation(ctx context.Context, c client.Client, o client.Object, key, value string) error {
	if o.GetAnnotations()[key] == value {
		return nil
	}
	p := lockedFrom(o)
	a := maps.Clone(o.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	if value == "" {
		delete(a, key)
	} else {
		a[key] = value
	}
	o.SetAnnotations(a)
	return c.Patch(ctx, o, p)
}

// lockedFrom is a merge patch from o as it is now, with an optimistic lock.
func lockedFrom(o client.Object) client.Patch {
	return client.MergeFromWithOptions(o.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
}
