package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// writeCounter counts API writes: those that succeeded, and those refused with a conflict (a
// reconcile that read a stale cache; the optimistic lock rejects its write).
// Successful writes are also counted per kind of object.
type writeCounter struct {
	ok, conflicts atomic.Int64
	mu            sync.Mutex
	byKind        map[string]int64
}

func (w *writeCounter) count(obj any, err error) error {
	switch {
	case err == nil:
		w.ok.Add(1)
		w.mu.Lock()
		if w.byKind == nil {
			w.byKind = map[string]int64{}
		}
		w.byKind[reflect.TypeOf(obj).Elem().Name()]++
		w.mu.Unlock()
	case apierrors.IsConflict(err):
		w.conflicts.Add(1)
	}
	return err
}

func (w *writeCounter) kinds() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for k, v := range w.byKind {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// countingClient counts the writes a manager makes to the API server (object and subresource
// create, update, patch, apply and delete). Events go through their own client and are counted
// separately.
type countingClient struct {
	client.Client
	writes *writeCounter
}

func (c countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	return c.writes.count(obj, c.Client.Create(ctx, obj, opts...))
}

func (c countingClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	return c.writes.count(obj, c.Client.Update(ctx, obj, opts...))
}

func (c countingClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	return c.writes.count(obj, c.Client.Patch(ctx, obj, patch, opts...))
}

func (c countingClient) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	return c.writes.count(obj, c.Client.Apply(ctx, obj, opts...))
}

func (c countingClient) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	return c.writes.count(obj, c.Client.Delete(ctx, obj, opts...))
}

func (c countingClient) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	return c.writes.count(obj, c.Client.DeleteAllOf(ctx, obj, opts...))
}

func (c countingClient) Status() client.SubResourceWriter {
	return countingSubResource{SubResourceClient: c.Client.SubResource("status"), writes: c.writes}
}

func (c countingClient) SubResource(name string) client.SubResourceClient {
	return countingSubResource{SubResourceClient: c.Client.SubResource(name), writes: c.writes}
}

type countingSubResource struct {
	client.SubResourceClient
	writes *writeCounter
}

func (c countingSubResource) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return c.writes.count(obj, c.SubResourceClient.Create(ctx, obj, sub, opts...))
}

func (c countingSubResource) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return c.writes.count(obj, c.SubResourceClient.Update(ctx, obj, opts...))
}

func (c countingSubResource) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return c.writes.count(obj, c.SubResourceClient.Patch(ctx, obj, patch, opts...))
}

func (c countingSubResource) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	return c.writes.count(obj, c.SubResourceClient.Apply(ctx, obj, opts...))
}
