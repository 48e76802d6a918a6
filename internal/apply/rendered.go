package apply

import (
	"context"
	"crypto/sha256"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// OwnedRendered is Owned for a child of kind gvk whose rendering costs more than a digest of its
// inputs (the alert rules: their YAML): digest must change whenever what render returns would.
// When rendered holds live, as cached, as the version found equal to a rendering of the same digest,
// render is not called and nothing is sent; otherwise the child is rendered and applied as Owned
// does (with rendered as its cache of applies), and a child found equal is held. It returns whether
// it applied.
func OwnedRendered(ctx context.Context, c client.Client, rendered *Cache, owner client.Object, gvk schema.GroupVersionKind, digest [sha256.Size]byte,
	render func() (runtime.Object, error), live client.Object) (bool, error) {
	if live != nil {
		if k, ok := renderedKey(owner, gvk, live); ok && rendered.has(k, digest) {
			return false, nil
		}
	}
	desired, err := render()
	if err != nil {
		return false, err
	}
	got, applied, equal, err := owned(ctx, c, rendered, owner, desired, live)
	if err == nil && !applied && equal {
		// got is the version compared: the cached one, or the one read past the cache.
		if k, ok := renderedKey(owner, gvk, got); ok {
			rendered.add(k, digest)
		}
	}
	return applied, err
}
