package ruleapi

import (
	"context"
	"fmt"
	"reflect"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/retryops/retry-operator/internal/apply"
	"github.com/retryops/retry-operator/internal/render"
)

// Apply applies owner's alert rules, set, as a PrometheusRule when the kind is served, and then
// deletes the ConfigMap of the same name that held them before; otherwise as a ConfigMap. set is
// built by the caller's render.PipelineRuleSet or render.DeadLetterQueueRuleSet. While the cached rule object is
// the version last found equal to a set of the same digest, nothing is rendered (apply.OwnedRendered):
// a resync of an unchanged resource does not encode its rule file again. It returns what was applied,
// in words (the message of a True AlertsReady), or the error of apply.Owned (an
// *apply.ConflictError for a name taken by another owner). applied is the cache of applies found
// unnecessary (apply.Cache; nil holds none).
func (a *API) Apply(ctx context.Context, c client.Client, applied *apply.Cache, owner client.Object, set render.RuleSet) (string, error) {
	served, err := a.Served()
	if err != nil {
		return "", err
	}
	digest, err := set.Digest()
	if err != nil {
		return "", err
	}
	key := client.ObjectKey{Namespace: set.Namespace, Name: set.Name}
	log := ctrl.LoggerFrom(ctx).WithValues(logKey(owner), klog.KObj(owner))
	if !served {
		live := apply.Cached(ctx, c, key, &corev1.ConfigMap{})
		wrote, err := apply.OwnedRendered(ctx, c, applied, owner, corev1.SchemeGroupVersion.WithKind("ConfigMap"), digest,
			func() (runtime.Object, error) { return set.ConfigMap() }, live)
		if err != nil {
			return "", err
		}
		if wrote {
			log.Info("Applied alert rules", "configMap", key.Name)
		}
		return fmt.Sprintf("alert rules in ConfigMap %s (the PrometheusRule kind is not served: load the rule file into Prometheus)", key.Name), nil
	}
	// When the rule cache cannot tell, live stays nil and Owned reads the object from the API server.
	var live client.Object
	if u, err := a.live(ctx, key); err == nil && u != nil {
		live = u
	}
	if wrote, err := apply.OwnedRendered(ctx, c, applied, owner, render.PrometheusRuleGVK, digest,
		func() (runtime.Object, error) { return set.PrometheusRule() }, live); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			// The CRD went between the lookup and the apply: not served until an event about it says otherwise.
			a.forget()
		}
		return "", err
	} else if wrote {
		log.Info("Applied alert rules", "prometheusRule", key.Name)
	}
	// The ConfigMap that held the rules before the kind was served.
	old := &corev1.ConfigMap{}
	if err := c.Get(ctx, key, old); err == nil && metav1.IsControlledBy(old, owner) {
		if err := c.Delete(ctx, old, client.Preconditions{UID: &old.UID}); client.IgnoreNotFound(err) != nil {
			return "", err
		}
		log.Info("Deleted alert ConfigMap", "configMap", key.Name, "replacedBy", "PrometheusRule")
	} else if err != nil && !apierrors.IsNotFound(err) {
		return "", err
	}
	return fmt.Sprintf("alert rules in PrometheusRule %s", key.Name), nil
}

// logKey is the log key of an owner: its kind in lower camel case ("deadLetterQueue").
func logKey(o client.Object) string {
	t := reflect.TypeOf(o)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	r := []rune(t.Name())
	if len(r) == 0 {
		return "owner"
	}
	r[0] = unicode.ToLower(r[0])
	return string(r)
}
