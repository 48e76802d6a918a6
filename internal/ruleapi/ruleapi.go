// Package ruleapi knows whether the API server serves the Prometheus Operator's PrometheusRule
// kind, follows its CRD coming and going, watches the operator's PrometheusRules while it is served,
// and applies a resource's alert rules in the form the cluster takes: a PrometheusRule when the
// kind is served, else a ConfigMap holding the same rule file.
package ruleapi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/retryops/retry-operator/internal/render"
)

// prometheusRuleCRD is the name of the Prometheus Operator's PrometheusRule CRD.
const prometheusRuleCRD = "prometheusrules.monitoring.coreos.com"

// crdGVK is the kind of CustomResourceDefinitions, watched by metadata only (the apiextensions types
// need not be in the scheme).
var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// ruleCacheTimeout bounds a read of a PrometheusRule from the rule cache (which waits for the cache
// to sync); past it the rules are applied without comparing.
const ruleCacheTimeout = 5 * time.Second

// API knows whether the API server serves PrometheusRule (monitoring.coreos.com/v1), for every
// controller that applies alert rules.
//
// Detection: the first question is answered by a RESTMapper lookup (controller-runtime's mapper is
// lazy: a miss asks discovery again, so the lookup also sees a CRD installed since the last one).
// After that the answer changes only on an event about the CRD itself: both controllers watch
// CustomResourceDefinitions by metadata (so the apiextensions types need not be in the scheme), and an
// event about prometheusrules.monitoring.coreos.com looks the kind up again (a delete, or a CRD being
// deleted, means not served: the mapper would still remember the kind) and re-enqueues every
// pipeline and queue, so that each switches between PrometheusRule and ConfigMap at once. While the
// CRD exists but the kind is not served yet (the CRD not yet established, or discovery a moment
// behind), every Served looks again, so the switch happens at the latest one resync later. An apply
// that finds the kind gone makes it not served until the next event about the CRD (never a lookup:
// the mapper would still remember the kind).
//
// Watch: a PrometheusRule watch cannot be registered at setup (without the CRD a kind source never
// syncs and the controller fails to start), and the manager's cache cannot drop an informer safely
// while reconciles read through it. So while the kind is served, a cache of its own holds the
// operator's PrometheusRules (label app.kubernetes.io/managed-by=retry-operator): it is started when
// the kind becomes served, both controllers then watch it (an edit or deletion of an owned rule
// object re-enqueues its owner, which applies it again), and it is stopped when the CRD goes. The
// same cache answers the "is anything to change?" read before an apply.
type API struct {
	mapper   meta.RESTMapper
	newCache func() (cache.Cache, error)

	mu       sync.Mutex
	ctx      context.Context // the manager's, once Start ran
	known    bool
	served   bool
	pending  bool // the CRD exists, the kind is not served yet
	rules    *ruleCache
	watchers []func(cache.Cache) error
}

// ruleCache is a running cache of PrometheusRules.
type ruleCache struct {
	cache  cache.Cache
	cancel context.CancelFunc
}

// New returns the API of mgr's cluster; add it to mgr (it is a Runnable) so that its rule cache
// follows the manager's life. The rule cache holds the PrometheusRules of namespaces only, or of
// every namespace when it is empty (--watch-namespaces).
func New(mgr ctrl.Manager, namespaces []string) *API {
	managed := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.LabelManagedByValue})
	var nss map[string]cache.Config
	if len(namespaces) > 0 {
		nss = map[string]cache.Config{}
		for _, ns := range namespaces {
			nss[ns] = cache.Config{}
		}
	}
	return &API{
		mapper: mgr.GetRESTMapper(),
		newCache: func() (cache.Cache, error) {
			return cache.New(mgr.GetConfig(), cache.Options{
				HTTPClient:           mgr.GetHTTPClient(),
				Scheme:               mgr.GetScheme(),
				Mapper:               mgr.GetRESTMapper(),
				DefaultLabelSelector: managed,
				DefaultNamespaces:    nss,
			})
		},
	}
}

// Start keeps the manager's context for the rule cache, and stops that cache when the manager stops.
func (a *API) Start(ctx context.Context) error {
	a.mu.Lock()
	a.ctx = ctx
	if a.served && a.rules == nil {
		a.startCacheLocked()
	}
	a.mu.Unlock()
	<-ctx.Done()
	a.mu.Lock()
	a.stopCacheLocked()
	a.mu.Unlock()
	return nil
}

// NeedLeaderElection is false: the rule cache only starts when a reconcile or a CRD event (both
// leader-only) finds the kind served.
func (a *API) NeedLeaderElection() bool { return false }

// Served reports whether PrometheusRule is served, looking it up the first time (and each time while
// its CRD exists without the kind being served yet).
func (a *API) Served() (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.known || a.pending {
		served, err := a.lookup()
		if err != nil {
			return false, fmt.Errorf("looking up %s: %w", render.PrometheusRuleGVK.GroupKind(), err)
		}
		a.setLocked(served)
	}
	return a.served, nil
}

// forget records that an apply found the kind gone: not served until an event about its CRD says
// otherwise (crdChanged looks it up again). It does not ask the RESTMapper, which remembers a kind
// whose CRD was deleted and would answer "served" for ever.
func (a *API) forget() {
	a.mu.Lock()
	a.pending = false
	a.setLocked(false)
	a.mu.Unlock()
}

func (a *API) lookup() (bool, error) {
	gvk := render.PrometheusRuleGVK
	_, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	switch {
	case err == nil:
		return true, nil
	case meta.IsNoMatchError(err):
		return false, nil
	default:
		return false, err
	}
}

// crdChanged takes an event about the PrometheusRule CRD into account.
func (a *API) crdChanged(ctx context.Context, crd client.Object, deleted bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	was, known := a.served, a.known
	if deleted || !crd.GetDeletionTimestamp().IsZero() {
		a.pending = false
		a.setLocked(false)
	} else if served, err := a.lookup(); err != nil {
		// Looked up again by the next reconcile.
		a.known = false
		ctrl.LoggerFrom(ctx).Error(err, "Looking up the PrometheusRule kind failed")
		return
	} else {
		a.setLocked(served)
		// The CRD exists but discovery does not list the kind yet (not yet established, or
		// published a moment later): look again at each Served until it does.
		a.pending = !served
	}
	if !known || was != a.served {
		ctrl.LoggerFrom(ctx).Info("PrometheusRule kind changed", "served", a.served)
	}
}

// setLocked records whether the kind is served and starts or stops the rule cache to match.
func (a *API) setLocked(served bool) {
	a.known, a.served = true, served
	if served {
		a.pending = false
	}
	switch {
	case served && a.rules == nil && a.ctx != nil:
		a.startCacheLocked()
	case !served:
		a.stopCacheLocked()
	}
}

func (a *API) startCacheLocked() {
	log := ctrl.LoggerFrom(a.ctx)
	c, err := a.newCache()
	if err != nil {
		// Without it, rules are applied on every reconcile, and drift waits for the resync.
		log.Error(err, "Creating the PrometheusRule cache failed")
		return
	}
	ctx, cancel := context.WithCancel(a.ctx)
	a.rules = &ruleCache{cache: c, cancel: cancel}
	go func() {
		if err := c.Start(ctx); err != nil {
			log.Error(err, "PrometheusRule cache stopped")
		}
	}()
	// Registered outside the lock and off the caller's goroutine: a controller that is still
	// starting holds its own lock until its sources synced, and those sources' handlers may be
	// waiting for this one.
	watchers := a.watchers
	go func() {
		for _, w := range watchers {
			if err := w(c); err != nil {
				log.Error(err, "Watching PrometheusRules failed")
			}
		}
	}()
}

func (a *API) stopCacheLocked() {
	if a.rules != nil {
		a.rules.cancel()
		a.rules = nil
	}
}

// watch registers a controller whose objects own PrometheusRules: while the kind is served, an
// event on a rule object enqueues its controller owner, of owner's kind.
func (a *API) Watch(c controller.Controller, scheme *runtime.Scheme, owner client.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.watchers = append(a.watchers, func(rc cache.Cache) error {
		return c.Watch(source.Kind(rc, newRuleObject(),
			handler.TypedEnqueueRequestForOwner[*unstructured.Unstructured](scheme, a.mapper, owner, handler.OnlyControllerOwner())))
	})
}

// live returns the PrometheusRule of that name as cached, nil when there is none, or an error when
// the cache cannot tell (not started, not synced in time).
func (a *API) live(ctx context.Context, key client.ObjectKey) (*unstructured.Unstructured, error) {
	a.mu.Lock()
	rc := a.rules
	a.mu.Unlock()
	if rc == nil {
		return nil, errors.New("no PrometheusRule cache")
	}
	ctx, cancel := context.WithTimeout(ctx, ruleCacheTimeout)
	defer cancel()
	u := newRuleObject()
	if err := rc.cache.Get(ctx, key, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return u, nil
}

func newRuleObject() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(render.PrometheusRuleGVK)
	return u
}

// crdHandler handles events about CustomResourceDefinitions: one about the PrometheusRule CRD updates
// rules and enqueues every object list names (all of one controller's kind).
func crdHandler(rules *API, c client.Reader, list func() client.ObjectList) handler.EventHandler {
	enqueueAll := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		l := list()
		if err := c.List(ctx, l); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing objects to re-enqueue after a PrometheusRule CRD change failed")
			return
		}
		_ = meta.EachListItem(l, func(o runtime.Object) error {
			if obj, ok := o.(client.Object); ok {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(obj)})
			}
			return nil
		})
	}
	on := func(ctx context.Context, o client.Object, deleted bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if o.GetName() != prometheusRuleCRD {
			return
		}
		rules.crdChanged(ctx, o, deleted)
		enqueueAll(ctx, q)
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			on(ctx, e.Object, false, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			on(ctx, e.ObjectNew, false, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			on(ctx, e.Object, true, q)
		},
	}
}

// WatchCRD adds to a controller's builder the watch of the PrometheusRule CRD (by metadata): an
// event about it updates a and enqueues every object list names (all of the controller's kind,
// listed through c).
func (a *API) WatchCRD(b *builder.Builder, c client.Reader, list func() client.ObjectList) *builder.Builder {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdGVK)
	return b.WatchesMetadata(crd, crdHandler(a, c, list))
}
