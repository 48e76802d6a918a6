package apply

import (
	"context"
	"crypto/sha256"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// foundEqual remembers, per child whose rendering is costly, the digest of the inputs of the last
// rendering found equal to the child as cached, and that child's version: while the cache shows the
// same version and the inputs have the same digest, rendering again would give the same object and
// applying it would write nothing. An entry lives until the owner is forgotten (ForgetOwner). Its
// key names the owner without its UID, which the entry holds: an owner deleted and made again under
// the same name before a reconcile saw it gone (and so forgot it) takes its predecessor's entry
// instead of leaving it behind.
var foundEqual = &memo{}

// equalKey is the memo key of live, owner's child of kind gvk: false when owner does not control it
// (such a child is never skipped: Owned reports the conflict).
func equalKey(owner client.Object, gvk schema.GroupVersionKind, live client.Object) (memoKey, bool) {
	ref := metav1.GetControllerOf(live)
	if ref == nil || ref.UID != owner.GetUID() {
		return memoKey{}, false
	}
	return memoKey{ownerKind: ref.Kind, ownerName: owner.GetName(), gvk: gvk,
		namespace: live.GetNamespace(), name: live.GetName()}, true
}

// holds reports whether k's entry is owner's, of live's version with digest.
func (m *memo) holds(k memoKey, owner types.UID, live client.Object, digest [sha256.Size]byte) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.get(k)
	return ok && e.owner == owner && e.uid == live.GetUID() && e.resourceVersion == live.GetResourceVersion() && e.sum == digest
}

// rememberEqual records that owner's child live was found equal to a rendering of digest.
func (m *memo) rememberEqual(k memoKey, owner types.UID, live client.Object, digest [sha256.Size]byte) {
	m.mu.Lock()
	m.set(k, memoEntry{uid: live.GetUID(), resourceVersion: live.GetResourceVersion(), sum: digest, owner: owner})
	m.mu.Unlock()
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
		if keyed && foundEqual.holds(k, owner.GetUID(), live, digest) {
			return false, nil
		}
	}
	desired, err := render()
	if err != nil {
		return false, err
	}
	got, applied, equal, err := owned(ctx, c, owner, desired, live)
	if err != nil || applied {
		if keyed {
			foundEqual.forget(k)
		}
	} else if equal {
		// got is the version compared: the cached one, or the one read past the cache.
		if k, ok := equalKey(owner, gvk, got); ok {
			foundEqual.rememberEqual(k, owner.GetUID(), got, digest)
		}
	}
	return applied, err
}
