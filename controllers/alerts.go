package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/retryops/retry-operator/api/v1alpha1"
	"github.com/retryops/retry-operator/internal/render"
)

// fieldOwner is the server-side apply field manager of every object the operator applies.
const fieldOwner = "retry-operator"

// prometheusRuleCRD is the name of the Prometheus Operator's PrometheusRule CRD.
const prometheusRuleCRD = "prometheusrules.monitoring.coreos.com"

// crdGVK is the kind of CustomResourceDefinitions, watched by metadata only (the apiextensions types
// need not be in the scheme).
var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// ruleCacheTimeout bounds a read of a PrometheusRule from the rule cache (which waits for the cache
// to sync); past it the rules are applied without comparing.
const ruleCacheTimeout = 5 * time.Second

// Condition reasons of the children (DeploymentReady, AlertsReady) that only this controller uses.
const (
	// reasonNameConflict: an object of the child's name exists and another controller owns it.
	reasonNameConflict = "NameConflict"
	// reasonRulesApplied: the alert rules are in place (AlertsReady True).
	reasonRulesApplied = "RulesApplied"
	// reasonWaitingForReferences: the RetryPolicy or DeadLetterQueue is missing or invalid, so the
	// children cannot be rendered; existing ones are left as they are.
	reasonWaitingForReferences = "WaitingForReferences"
	// reasonWaitingForTopics: the Deployment is first created once the topics are ready.
	reasonWaitingForTopics = "WaitingForTopics"
)

// ruleAPI knows whether the API server serves PrometheusRule (monitoring.coreos.com/v1), for both
// controllers that apply alert rules.
//
// Detection: the first question is answered by a RESTMapper lookup (controller-runtime's mapper is
// lazy: a miss asks discovery again, so the lookup also sees a CRD installed since the last one).
// After that the answer changes only on an event about the CRD itself: both controllers watch
// CustomResourceDefinitions by metadata (so the apiextensions types need not be in the scheme), and an
// event about prometheusrules.monitoring.coreos.com looks the kind up again (a delete, or a CRD being
// deleted, means not served: the mapper would still remember the kind) and re-enqueues every
// pipeline and queue, so that each switches between PrometheusRule and ConfigMap at once. While the
// CRD exists but the kind is not served yet (the CRD not yet established, or discovery a moment
// behind), every Served looks again, so the switch happens at the latest one resync later.
//
// Watch: a PrometheusRule watch cannot be registered at setup (without the CRD a kind source never
// syncs and the controller fails to start), and the manager's cache cannot drop an informer safely
// while reconciles read through it. So while the kind is served, a cache of its own holds the
// operator's PrometheusRules (label app.kubernetes.io/managed-by=retry-operator): it is started when
// the kind becomes served, both controllers then watch it (an edit or deletion of an owned rule
// object re-enqueues its owner, which applies it again), and it is stopped when the CRD goes. The
// same cache answers the "is anything to change?" read before an apply.
type ruleAPI struct {
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

func newRuleAPI(mgr ctrl.Manager) *ruleAPI {
	managed := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.LabelManagedByValue})
	return &ruleAPI{
		mapper: mgr.GetRESTMapper(),
		newCache: func() (cache.Cache, error) {
			return cache.New(mgr.GetConfig(), cache.Options{
				HTTPClient:           mgr.GetHTTPClient(),
				Scheme:               mgr.GetScheme(),
				Mapper:               mgr.GetRESTMapper(),
				DefaultLabelSelector: managed,
			})
		},
	}
}

// Start keeps the manager's context for the rule cache, and stops that cache when the manager stops.
func (a *ruleAPI) Start(ctx context.Context) error {
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
func (a *ruleAPI) NeedLeaderElection() bool { return false }

// Served reports whether PrometheusRule is served, looking it up the first time (and each time while
// its CRD exists without the kind being served yet).
func (a *ruleAPI) Served() (bool, error) {
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

// forget makes the next Served look the kind up again (after an apply found it gone).
func (a *ruleAPI) forget() {
	a.mu.Lock()
	a.known = false
	a.mu.Unlock()
}

func (a *ruleAPI) lookup() (bool, error) {
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
func (a *ruleAPI) crdChanged(ctx context.Context, crd client.Object, deleted bool) {
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
func (a *ruleAPI) setLocked(served bool) {
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

func (a *ruleAPI) startCacheLocked() {
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

func (a *ruleAPI) stopCacheLocked() {
	if a.rules != nil {
		a.rules.cancel()
		a.rules = nil
	}
}

// watch registers a controller whose objects own PrometheusRules: while the kind is served, an
// event on a rule object enqueues its controller owner, of owner's kind.
func (a *ruleAPI) watch(c controller.Controller, scheme *runtime.Scheme, owner client.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.watchers = append(a.watchers, func(rc cache.Cache) error {
		return c.Watch(source.Kind(rc, newRuleObject(),
			handler.TypedEnqueueRequestForOwner[*unstructured.Unstructured](scheme, a.mapper, owner, handler.OnlyControllerOwner())))
	})
}

// live returns the PrometheusRule of that name as cached, nil when there is none, or an error when
// the cache cannot tell (not started, not synced in time).
func (a *ruleAPI) live(ctx context.Context, key client.ObjectKey) (*unstructured.Unstructured, error) {
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
func crdHandler(rules *ruleAPI, c client.Reader, list func() client.ObjectList) handler.EventHandler {
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

// watchRuleCRD adds the watch of the PrometheusRule CRD (by metadata) to a controller's builder.
func watchRuleCRD(b *builder.Builder, rules *ruleAPI, c client.Reader, list func() client.ObjectList) *builder.Builder {
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(crdGVK)
	return b.WatchesMetadata(crd, crdHandler(rules, c, list))
}

// alertObjects are the two renderings of one set of alert rules.
type alertObjects struct {
	// rule renders the PrometheusRule; configMap the ConfigMap holding the same rule file.
	rule      func() (*unstructured.Unstructured, error)
	configMap func() (*corev1.ConfigMap, error)
	// key is the name and namespace both share.
	key client.ObjectKey
}

// applyAlertRules applies owner's alert rules as a PrometheusRule when the kind is served, and then
// deletes the ConfigMap of the same name that held them before; otherwise as a ConfigMap. It returns
// the message of a True AlertsReady, or a *problem (a spec error, a name taken by another owner).
func applyAlertRules(ctx context.Context, c client.Client, rules *ruleAPI, owner client.Object, objs alertObjects) (string, error) {
	served, err := rules.Served()
	if err != nil {
		return "", err
	}
	log := ctrl.LoggerFrom(ctx).WithValues(ownerLogKey(owner), klog.KObj(owner))
	if !served {
		cm, err := objs.configMap()
		if err != nil {
			return "", renderProblem(err)
		}
		_, applied, err := applyOwned(ctx, c, owner, cm, cachedChild(ctx, c, objs.key, &corev1.ConfigMap{}))
		if err != nil {
			return "", err
		}
		if applied {
			log.Info("Applied alert rules", "configMap", objs.key.Name)
		}
		return fmt.Sprintf("alert rules in ConfigMap %s (the PrometheusRule kind is not served: load the rule file into Prometheus)", objs.key.Name), nil
	}
	pr, err := objs.rule()
	if err != nil {
		return "", renderProblem(err)
	}
	// When the cache cannot tell, the rules are applied without comparing.
	var live client.Object
	if u, err := rules.live(ctx, objs.key); err == nil && u != nil {
		live = u
	}
	if _, applied, err := applyOwned(ctx, c, owner, pr, live); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			// The CRD went between the lookup and the apply: look again next time.
			rules.forget()
		}
		return "", err
	} else if applied {
		log.Info("Applied alert rules", "prometheusRule", objs.key.Name)
	}
	// The ConfigMap that held the rules before the kind was served.
	old := &corev1.ConfigMap{}
	if err := c.Get(ctx, objs.key, old); err == nil && metav1.IsControlledBy(old, owner) {
		if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return "", err
		}
		log.Info("Deleted alert ConfigMap", "configMap", objs.key.Name, "replacedBy", "PrometheusRule")
	} else if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	return fmt.Sprintf("alert rules in PrometheusRule %s", objs.key.Name), nil
}

func ownerLogKey(o client.Object) string {
	switch o.(type) {
	case *v1.DeadLetterQueue:
		return "deadLetterQueue"
	case *v1.ConsumerPipeline:
		return "consumerPipeline"
	}
	return "owner"
}

// renderProblem turns a render error into a problem: a *render.SpecError is a user error
// (InvalidSpec, wait for a change); anything else is returned as is (a caller mistake, retried).
func renderProblem(err error) error {
	var se *render.SpecError
	if errors.As(err, &se) {
		return &problem{Reason: v1.ReasonInvalidSpec, Kind: problemUser, Message: truncate(se.Error(), maxConditionMessage)}
	}
	return err
}

// cachedChild reads a child from the cache into obj: obj when it exists, nil when it does not or
// the read failed (then the child is applied without comparing).
func cachedChild(ctx context.Context, c client.Reader, key client.ObjectKey, obj client.Object) client.Object {
	if err := c.Get(ctx, key, obj); err != nil {
		return nil
	}
	return obj
}

// applyOwned applies desired (a typed object or an unstructured one, with apiVersion and kind) with
// server-side apply as fieldOwner, forcing ownership of its fields, with owner as controller owner
// (and blockOwnerDeletion). live is the object as cached (nil when absent or unknown): when it
// already holds every field desired sets, with the same values, nothing is sent, so a resync writes
// nothing. Otherwise the apply reverts out-of-band changes to the fields the operator owns; fields it
// does not set (defaults, other managers' additions) are left alone. A list to which another
// manager added items never compares equal: it is applied again at each reconcile, which the API
// server answers without a change.
//
// It returns the object as the API server has it after the apply (or as cached), and whether it
// applied. An object of that name controlled by another owner is a *problem (NameConflict); an
// object the API server rejects as invalid (a pod template that passes the CRD's schema but not the
// Deployment's validation) is a user *problem (InvalidSpec).
func applyOwned(ctx context.Context, c client.Client, owner client.Object, desired runtime.Object, live client.Object) (*unstructured.Unstructured, bool, error) {
	u, err := applyObject(desired)
	if err != nil {
		return nil, false, err
	}
	if err := controllerutil.SetControllerReference(owner, u, c.Scheme()); err != nil {
		return nil, false, err
	}
	if live != nil {
		if ref := metav1.GetControllerOf(live); ref != nil && ref.UID != owner.GetUID() {
			return nil, false, &problem{Reason: reasonNameConflict, Kind: problemWaiting, Message: fmt.Sprintf(
				"%s %s exists and belongs to %s %s: delete or rename it", u.GetKind(), u.GetName(), ref.Kind, ref.Name)}
		}
		have, err := toUnstructuredMap(live)
		if err != nil {
			return nil, false, err
		}
		want := maps.Clone(u.Object)
		// Objects read from the cache may lack their apiVersion and kind.
		delete(want, "apiVersion")
		delete(want, "kind")
		if contains(have, want) {
			return &unstructured.Unstructured{Object: have}, false, nil
		}
	}
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		if apierrors.IsInvalid(err) {
			return nil, false, &problem{Reason: v1.ReasonInvalidSpec, Kind: problemUser, Message: truncate(err.Error(), maxConditionMessage)}
		}
		return nil, false, err
	}
	return u, true, nil
}

// applyObject converts an object to the unstructured form applied: without status, without null
// values (a typed object's zero creationTimestamp, say), so that the operator owns only the fields
// it sets.
func applyObject(obj runtime.Object) (*unstructured.Unstructured, error) {
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

// reconcileAlerts is the DeadLetterQueue's Alerts step: it applies the queue's own alert rules (size,
// growth, oldest dead letter), owned by the queue. It comes before the Kafka steps, which the rules
// do not depend on, so that they are in place while the brokers are unreachable. A problem (a name
// taken by another owner) makes Ready False without stopping the other steps.
func (r *DeadLetterQueueReconciler) reconcileAlerts(ctx context.Context, s *dlqScope) error {
	in := &render.DeadLetterQueueInputs{DLQ: s.dlq, RuleLabels: r.RuleLabels}
	_, err := applyAlertRules(ctx, r.Client, r.Rules, s.dlq, alertObjects{
		rule:      func() (*unstructured.Unstructured, error) { return render.DeadLetterQueuePrometheusRule(in) },
		configMap: func() (*corev1.ConfigMap, error) { return render.DeadLetterQueueAlertConfigMap(in) },
		key:       client.ObjectKey{Namespace: s.dlq.Namespace, Name: render.DeadLetterQueueAlertsName(s.dlq)},
	})
	return recordProblem(&s.problems, err)
}
