package apply

import (
	"context"
	"crypto/sha256"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// foundEqual remembers, per child whose rendering is costly, the digest of the inputs of the last
// rendering found equal to the child as cached, and that child's version: while the cache shows the
// same version and the inputs have the same digest, rendering again would give the same object and
// applying it would write nothing. An entry lives until the owner is forgotten (ForgetOwner).
var foundEqual = &memo{m: map[memoKey]memoEntry{}}

// equalKey is the memo key of live, owner's child of kind gvk: false when owner does not control it
// (such a child is never skipped: Owned reports the conflict).
func equalKey(owner client.Object, gvk schema.GroupVersionKind, live client.Object) (memoKey, bool) {
	ref := metav1.GetControllerOf(live)
	if ref == nil || ref.UID != owner.GetUID() {
		return memoKey{}, false
	}
	return memoKey{owner: owner.GetUID(), ownerKind: ref.Kind, ownerName: owner.GetName(), gvk: gvk,
		namespace: live.GetNamespace(), name: live.GetName()}, true
}

// holds reports whether k's entry is live's version with digest.
func (m *memo) holds(k memoKey, live client.Object, digest [sha256.Size]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[k]
	return ok && e.uid == live.GetUID() && e.resourceVersion == live.GetResourceVersion() && e.sum == digest
}

// OwnedRendered is Owned for a child of kind gvk whose rendering costs more than a digest of its
// inputs (the alert rules: their YAML): digest must change whenever what render returns would.
// When live, as cached, is the version last found equal to a rendering of the same digest, render
// is not called and nothing is sent; otherwise the child is rendered and applied as Owned does. It
// returns whether it applied.
func OwnedRendered(ctx context.Context, c client.Client, owner client.Object, gvk schema.GroupVersionKind, digest [sha256.Size]byte,
	render func() (runtime.Object, error), live client.Object) (bool, error) {
	k, keyed := memoKey{}, false
	if live != nil {
		k, keyed = equalKey(owner, gvk, live)
		if keyed && foundEqual.holds(k, live, digest) {
			return false, nil
		}
	}
	desired, err := render()
	if err != nil {
		return false, err
	}
	got, applied, equal, err := owned(ctx, c, owner, desired, live)
	switch {
	case err != nil || applied:
		if keyed {
			foundEqual.forget(k)
		}
	case equal && live != nil && keyed:
		foundEqual.remember(k, live, digest)
	case equal && live == nil && got != nil:
		// Found past the cache (checkUncached): remembered at the version read.
		if k, ok := equalKey(owner, gvk, got); ok {
			foundEqual.remember(k, got, digest)
		}
	}
	return applied, err
}
